// Compile the protocol with protox (pure Rust): no system protoc is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The protocol lives at the repository's top level (`proto/`), beside `crates/`: it is the
    // contract every implementation (this crate, examples/python) compiles from.
    let protos = ["../../proto/dpcotrain/v2/node.proto"];
    let includes = ["../../proto"];
    let fds = protox::compile(protos, includes)?;
    // Decode errors are the caller's: INVALID_ARGUMENT (src/codec.rs), not prost's INTERNAL.
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .codec_path("crate::codec::StrictCodec")
        .compile_fds(fds)?;
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}
