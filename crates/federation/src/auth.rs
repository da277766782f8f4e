//! Who is calling: per-peer bearer tokens, bound to the mutual-TLS certificate when TLS is on.
//!
//! Every pair of parties shares one secret token (presented in both directions), and the
//! orchestrator has its own. A call is accepted when its `authorization: Bearer …` token is
//! one this node knows; the token names the principal. With TLS, the client certificate's
//! common name must name the same principal — a stolen token alone is not enough, and a
//! certificate alone is not enough. Only peers named in the node's configuration have tokens,
//! so a node answers nobody else.

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// The principal name of the orchestrator (`dpcotrain run`).
pub const ORCHESTRATOR: &str = "orchestrator";

/// Who a call comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Authentication is off (library tests, `insecure` development nodes).
    Anyone,
    Peer(String),
    Orchestrator,
}

/// The node's access list.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// (token, principal name); empty means authentication is off.
    tokens: Vec<(String, String)>,
    /// Require the client certificate's CN to equal the token's principal.
    bind_tls: bool,
}

/// Smallest accepted token length (characters).
pub const MIN_TOKEN_LEN: usize = 16;

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant-time for equal lengths; lengths are not secret.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// No authentication (every call is [`Principal::Anyone`]).
    pub fn open() -> Self {
        Auth::default()
    }

    /// Tokens per principal (peer names, or [`ORCHESTRATOR`]).
    pub fn tokens(tokens: Vec<(String, String)>, bind_tls: bool) -> Result<Self, String> {
        for (tok, who) in &tokens {
            if tok.len() < MIN_TOKEN_LEN {
                return Err(format!("the token for {who:?} is shorter than {MIN_TOKEN_LEN} characters"));
            }
        }
        for (i, (a, who)) in tokens.iter().enumerate() {
            if let Some((_, other)) = tokens[i + 1..].iter().find(|(b, _)| b == a) {
                return Err(format!("{who:?} and {other:?} share a token: every principal needs its own"));
            }
        }
        Ok(Auth { tokens, bind_tls })
    }

    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Authenticate a call.
    pub fn check<T>(&self, req: &Request<T>) -> Result<Principal, Status> {
        if self.tokens.is_empty() {
            return Ok(Principal::Anyone);
        }
        let presented = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing bearer token (authorization: Bearer …)"))?;
        let mut found: Option<&str> = None;
        for (tok, who) in &self.tokens {
            if ct_eq(tok.as_bytes(), presented.as_bytes()) {
                found = Some(who);
            }
        }
        let who = found.ok_or_else(|| Status::unauthenticated("unknown bearer token: this node does not know you"))?;
        if self.bind_tls {
            match crate::tls::peer_identity(req) {
                Some(cn) if cn == who => {}
                Some(cn) => {
                    return Err(Status::unauthenticated(format!(
                        "client certificate is for {cn:?} but the token is {who:?}'s"
                    )));
                }
                None => return Err(Status::unauthenticated("no verified client certificate")),
            }
        }
        Ok(if who == ORCHESTRATOR { Principal::Orchestrator } else { Principal::Peer(who.to_string()) })
    }
}

/// Attach a bearer token and a deadline to an outgoing request.
pub fn request<T>(msg: T, token: Option<&str>, timeout: std::time::Duration) -> Result<Request<T>, String> {
    let mut r = Request::new(msg);
    if let Some(t) = token {
        let v: MetadataValue<_> = format!("Bearer {t}")
            .parse()
            .map_err(|_| "token contains characters not allowed in a header".to_string())?;
        r.metadata_mut().insert("authorization", v);
    }
    r.set_timeout(timeout);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_principals() {
        let a = Auth::tokens(vec![("b".repeat(20), "B".into()), ("o".repeat(20), ORCHESTRATOR.into())], false).unwrap();
        let d = std::time::Duration::from_secs(1);
        assert_eq!(a.check(&request((), Some(&"b".repeat(20)), d).unwrap()).unwrap(), Principal::Peer("B".into()));
        assert_eq!(a.check(&request((), Some(&"o".repeat(20)), d).unwrap()).unwrap(), Principal::Orchestrator);
        let e = a.check(&request((), Some(&"x".repeat(20)), d).unwrap()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let e = a.check(&request((), None, d).unwrap()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(Auth::tokens(vec![("short".into(), "B".into())], false).is_err());
        assert!(Auth::tokens(vec![("t".repeat(20), "B".into()), ("t".repeat(20), "C".into())], false).is_err());
        assert_eq!(Auth::open().check(&Request::new(())).unwrap(), Principal::Anyone);
    }
}
