#!/usr/bin/env python3
"""A dpcotrain client in Python that uses nothing but the protocol file.

It compiles proto/dpcotrain/v2/node.proto with grpcio-tools at start-up, connects to a running
node over mutual TLS with a bearer token, and
  * as the orchestrator (default): prints the node's Status;
  * with --as PEER: handshakes as that peer (agreeing on the pool hash, y standardisation and
    privacy policy read from the node's party TOML) and asks for DP-noised predictions at
    --indices (this is a real release: it is charged to PEER's ledger at the node).

    pip install grpcio grpcio-tools
    python3 examples/python/client.py --config examples/two-party/party-a.toml
    python3 examples/python/client.py --config examples/two-party/party-a.toml --as B --indices 0,1,2

Only the standard library, grpcio and grpcio-tools (for protoc) are needed.
"""
import argparse
import atexit
import importlib
import json
import pathlib
import shutil
import sys
import tempfile
import tomllib

import grpc
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"


def stubs():
    """Compile node.proto into a temporary package and import it."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="dpcotrain-py-"))
    # The stubs are imported once; the folder goes when the client exits, however it exits.
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{PROTO}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}",
                      str(PROTO / "dpcotrain/v2/node.proto")])
    if rc != 0:
        sys.exit(f"protoc failed on {PROTO / 'dpcotrain/v2/node.proto'}")
    for d in [out / "dpcotrain", out / "dpcotrain/v2"]:
        (d / "__init__.py").touch()
    sys.path.insert(0, str(out))
    return importlib.import_module("dpcotrain.v2.node_pb2"), importlib.import_module("dpcotrain.v2.node_pb2_grpc")


def pool_hash(n):
    """FNV-1a 64 of the pool's index list "0\\n1\\n…(n-1)\\n" (as the Rust nodes compute it)."""
    h = 0xCBF29CE484222325
    for i in range(n):
        for b in f"{i}\n".encode():
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"fnv1a64:{h:016x}:{n}"


def rust_float(x):
    """A float as Rust's Display writes it (1.0 -> "1", 0.1 -> "0.1")."""
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def privacy_policy(pb, pv):
    """The handshake's privacy fields (mode, release policy, release terms) as a node derives
    them from its [privacy] table (crates/federation/src/agreement.rs: Agreement::of)."""
    mode = pv.get("mode", "calibrated")
    policy = pv.get("policy", "per-query" if mode == "thesis" else "batches")
    enums = {"privacy_mode": pb.PrivacyMode.Value("PRIVACY_MODE_" + mode.upper()),
             "release_policy": pb.ReleasePolicy.Value("RELEASE_POLICY_" + policy.upper().replace("-", "_"))}
    honest = policy == "batches"
    release = pv.get("release", "finite" if honest else "rkhs")
    theta = pv.get("theta", "public" if honest else "fitted")
    queries = pv.get("queries", "public" if honest else "adaptive")
    if release == "rkhs" and theta == "fitted" and queries == "adaptive":
        return {**enums, "release_terms": ""}
    if release == "finite":
        cap = pv.get("cap", "auto")
        if cap == "none":
            form = "finite"
        elif cap.startswith("eta="):
            form = f"finite+cap(eta={rust_float(cap[4:])})"
        else:
            form = f"finite+cap({cap})"
        rank = pv.get("rank", "auto" if honest else "full")
        if rank == "auto=3,5,10":
            rank = "auto"
        if rank != "full":
            form += f"+rank({rank})"
    else:
        form = "rkhs"
    if theta == "public":
        t = pv.get("public_theta", [1.0, 1.0, 0.1])
        # The release's length-scale unit (docs/decisions.md D32): named unless absolute.
        unit = pv.get("public_lengthscale_unit", "median")
        theta = "public(" + ",".join(rust_float(v) for v in t) + ("" if unit == "absolute" else f";ℓ in {unit}") + ")"
    return {**enums, "release_terms": f"{form}/theta={theta}/queries={queries}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the node's party TOML (address, secrets folder, policy)")
    ap.add_argument("--as", dest="who", default="orchestrator", help="orchestrator (default) or a peer's name")
    ap.add_argument("--indices", default="0", help="pool indices to ask about, comma-separated (with --as PEER)")
    ap.add_argument("--address", help="override host:port (default: the config's listen address)")
    a = ap.parse_args()

    cfg_path = pathlib.Path(a.config).resolve()
    cfg = tomllib.loads(cfg_path.read_text())
    node, base = cfg["name"], cfg_path.parent
    secrets = base / cfg["security"]["dir"]
    token_name = f"orchestrator-{node}" if a.who == "orchestrator" else "-".join(sorted([node, a.who]))
    creds = grpc.ssl_channel_credentials(
        root_certificates=(secrets / "ca.pem").read_bytes(),
        private_key=(secrets / f"{a.who}.key").read_bytes(),
        certificate_chain=(secrets / f"{a.who}.pem").read_bytes(),
    )
    token = (secrets / "tokens" / f"{token_name}.token").read_text().strip()
    meta = [("authorization", f"Bearer {token}")]
    # The node's certificate names the party: check we reach the party we mean.
    channel = grpc.secure_channel(a.address or cfg["listen"], creds,
                                  options=[("grpc.ssl_target_name_override", node)])
    pb, rpc = stubs()
    stub = rpc.NodeStub(channel)

    if a.who == "orchestrator":
        st = stub.Status(pb.StatusRequest(), metadata=meta, timeout=30)
        opt = lambda m, f: getattr(m, f) if m.HasField(f) else None  # noqa: E731 (absent: None)
        print(json.dumps({"party": st.party, "model_version": st.model_version, "rounds_done": st.rounds_done,
                          "test_rmse": opt(st, "test_rmse"), "test_rmse_alone": opt(st, "test_rmse_alone"),
                          "spend": [{"peer": s.peer, "epsilon": s.epsilon, "releases": s.releases} for s in st.spend]}))
        return

    pv, data = cfg.get("privacy", {}), cfg.get("data", {})
    n_pool = sum(1 for _ in open(base / data["pool"])) - 1
    mode = pv.get("mode", "calibrated")
    eps, delta, (lo, hi) = pv.get("epsilon", 1.0), pv.get("delta", 1e-5), pv.get("label_range", [-3.0, 3.0])
    if mode == "off":
        eps, delta, lo, hi = 0.0, 0.0, 0.0, 0.0
    elif mode == "thesis":
        eps, delta, lo, hi = 0.42, 0.0, 0.0, 0.0
    hs = stub.Handshake(pb.HandshakeRequest(
        protocol_version="dpcotrain.v2", federation_id=cfg["federation_id"], party=a.who,
        pool_hash=pool_hash(n_pool), y_mean=data.get("y_mean", 0.0), y_scale=data.get("y_scale", 1.0),
        epsilon=eps, delta=delta, label_lo=lo, label_hi=hi, **privacy_policy(pb, pv)),
        metadata=meta, timeout=30)
    if not hs.accepted:
        sys.exit(f"handshake refused by {hs.party}: {hs.reason}")
    idx = [int(i) for i in a.indices.split(",")]
    ans = stub.Predict(pb.PredictRequest(request_id=f"python-{a.who}-{a.indices}", requester=a.who, indices=idx,
                                         uncertainty=pb.UNCERTAINTY_MARGINAL, federation_id=cfg["federation_id"]),
                       metadata=meta, timeout=60)
    print(json.dumps({"responder": ans.responder, "indices": list(ans.indices), "mean": list(ans.mean),
                      "var": list(ans.var.values) if ans.HasField("var") else None,
                      "new_release": ans.charge.new_release, "rho": ans.charge.rho,
                      "budget_rho_left": ans.budget_rho_left if ans.HasField("budget_rho_left") else None}))


def run():
    """main(), with a refused or failed call as one line on stderr and exit status 1 (a node's
    refusal, such as a spent budget, is an answer, not a crash)."""
    try:
        main()
    except grpc.RpcError as e:
        sys.exit(f"error: {e.code().name}: {e.details()}")


if __name__ == "__main__":
    run()
