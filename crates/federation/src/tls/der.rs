//! A small DER walk over X.509 certificates: the subject, its common name and the public key —
//! all this crate needs, with no X.509 dependency. Never panics on any bytes (property tests in
//! `tls/mod.rs`).

/// One DER element split off a byte string: (tag, whole TLV, contents, rest).
pub(super) type Tlv<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// Splits one DER TLV (definite length) off `input`; `None` if truncated or malformed.
pub(super) fn tlv(input: &[u8]) -> Option<Tlv<'_>> {
    let (&tag, rest) = input.split_first()?;
    let (&len0, rest) = rest.split_first()?;
    let (len, rest) = if len0 < 0x80 {
        (usize::from(len0), rest)
    } else {
        let n = usize::from(len0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |a, &b| (a << 8) | usize::from(b)), &rest[n..])
    };
    let contents = rest.get(..len)?;
    Some((tag, &input[..input.len() - rest.len() + len], contents, &rest[len..]))
}

/// Raw DER (whole TLVs) of an X.509 certificate's issuer, subject and public key.
pub(super) struct CertParts<'a> {
    pub(super) issuer: &'a [u8],
    pub(super) subject: &'a [u8],
    pub(super) spki: &'a [u8],
}

pub(super) fn cert_parts(der: &[u8]) -> Option<CertParts<'_>> {
    let (_, _, cert, _) = tlv(der)?;
    let (_, _, mut tbs, _) = tlv(cert)?;
    if tbs.first() == Some(&0xa0) {
        tbs = tlv(tbs)?.3; // explicit [0] version
    }
    let mut f: [&[u8]; 6] = [&[]; 6]; // serial, signature alg, issuer, validity, subject, spki
    for slot in &mut f {
        let (_, whole, _, rest) = tlv(tbs)?;
        (*slot, tbs) = (whole, rest);
    }
    Some(CertParts { issuer: f[2], subject: f[4], spki: f[5] })
}

/// First commonName (OID 2.5.4.3) of a DER Name, if it is a UTF8/Printable/IA5 string.
pub(super) fn common_name(name: &[u8]) -> Option<String> {
    let (_, _, mut rdns, _) = tlv(name)?;
    while !rdns.is_empty() {
        let (_, _, mut set, rest) = tlv(rdns)?;
        rdns = rest;
        while !set.is_empty() {
            let (_, _, atv, rest) = tlv(set)?;
            set = rest;
            let (_, oid, _, value) = tlv(atv)?;
            if oid == [0x06, 0x03, 0x55, 0x04, 0x03] {
                let (tag, _, s, _) = tlv(value)?;
                let text = [0x0c, 0x13, 0x16].contains(&tag); // UTF8, Printable, IA5
                return if text { String::from_utf8(s.to_vec()).ok() } else { None };
            }
        }
    }
    None
}
