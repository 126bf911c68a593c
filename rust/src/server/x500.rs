//! The principal of a client certificate, as Kafka's default principal builder names it: `User:`
//! and the certificate's subject as Java's `X500Principal.getName()` renders it (RFC 2253, with
//! Java's choices where the RFC leaves one). The rendering must escape what it must: a subject
//! printed without escapes lets a certificate whose CN is `ops,O=example` pass for
//! `User:CN=ops,O=example`.

use rustls::pki_types::CertificateDer;
use x509_parser::asn1_rs::{SerializeError, Tag, ToDer};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// `User:` and the subject of `cert`.
pub(crate) fn principal(cert: &CertificateDer<'_>) -> String {
    let subject = x509_parser::parse_x509_certificate(cert)
        .ok()
        .and_then(|(_, cert)| rfc2253(cert.subject()).ok());
    // The handshake verified the certificate, so it parses; a principal no ACL names if not.
    let subject = subject.unwrap_or_else(|| "unparsable-certificate".to_string());
    format!("User:{subject}")
}

/// The attribute types RFC 2253 gives a keyword (Java's AVAKeyword table, the entries marked
/// RFC 2253 compliant), by dotted OID.
const KEYWORDS: [(&str, &str); 9] = [
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// What Java escapes with a backslash anywhere in a string value: RFC 2253's `,` `+` `"` `\`
/// `<` `>` `;`, and also `=` and `#` wherever they are (the RFC asks for `#` only at the start).
const ESCAPED: &str = ",=+<>#;\"\\";

/// `name` as `X500Principal.getName()` (Java's `X500Name.getRFC2253Name`, `RDN` and
/// `AVA.toRFC2253String`) writes it:
/// - the RDNs from the last to the first (the most specific, CN, usually first), joined by `,`;
///   the attributes of a multi-valued RDN in their encoded order, joined by `+`;
/// - an attribute type by its keyword (CN, C, L, ST, O, OU, STREET, DC, UID), any other by its
///   dotted OID;
/// - a value of a dotted OID type, or that is not a string, as `#` and the lower-case hex of its
///   DER encoding (tag and length too);
/// - a string value (Printable, T61, IA5, General, UTF8, BMP or Universal) as its bytes read as
///   UTF-8 (Java reads them so whatever the type), with a backslash before each character of
///   [`ESCAPED`] and before each space or carriage return at its start or end.
fn rfc2253(name: &X509Name<'_>) -> Result<String, SerializeError> {
    let mut rdns = name
        .iter()
        .map(|rdn| {
            let attributes: Vec<String> = rdn.iter().map(attribute).collect::<Result<_, _>>()?;
            Ok(attributes.join("+"))
        })
        .collect::<Result<Vec<_>, SerializeError>>()?;
    rdns.reverse();
    Ok(rdns.join(","))
}

fn attribute(attribute: &AttributeTypeAndValue<'_>) -> Result<String, SerializeError> {
    let oid = attribute.attr_type().to_id_string();
    let value = attribute.attr_value();
    let keyword = KEYWORDS.iter().find(|(dotted, _)| *dotted == oid);
    Ok(match keyword {
        Some((_, keyword)) if is_string(value.tag()) => {
            format!("{keyword}={}", escape(&String::from_utf8_lossy(value.data)))
        }
        Some((_, keyword)) => format!("{keyword}=#{}", hex(&value.to_der_vec()?)),
        None => format!("{oid}=#{}", hex(&value.to_der_vec()?)),
    })
}

/// The string types Java renders as text (`AVA.isDerString`, not canonical).
fn is_string(tag: Tag) -> bool {
    [
        Tag::PrintableString,
        Tag::T61String,
        Tag::Ia5String,
        Tag::GeneralString,
        Tag::Utf8String,
        Tag::BmpString,
        Tag::UniversalString,
    ]
    .contains(&tag)
}

fn escape(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    let blank = |c: &&char| **c == ' ' || **c == '\r';
    let leading = chars.iter().take_while(blank).count();
    // All blank: every character is leading, and escaped once.
    let trailing_from = chars.len() - chars[leading..].iter().rev().take_while(blank).count();
    let mut out = String::with_capacity(value.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if ESCAPED.contains(c) || i < leading || i >= trailing_from {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use x509_parser::asn1_rs::Oid;
    use x509_parser::prelude::FromDer;

    use super::*;

    const CN: &[u64] = &[2, 5, 4, 3];
    const O: &[u64] = &[2, 5, 4, 10];
    const UID: &[u64] = &[0, 9, 2342, 19200300, 100, 1, 1];
    const EMAIL: &[u64] = &[1, 2, 840, 113549, 1, 9, 1];

    /// A DER element: tag, length (short or long form), content.
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match u8::try_from(content.len()) {
            Ok(short) if short < 0x80 => out.push(short),
            _ => {
                let length = content.len().to_be_bytes();
                let significant: Vec<u8> = length.into_iter().skip_while(|&b| b == 0).collect();
                out.push(0x80 | significant.len() as u8);
                out.extend(significant);
            }
        }
        out.extend_from_slice(content);
        out
    }

    /// One attribute (type and value) with a value of string type `tag`.
    fn attr(oid: &[u64], tag: Tag, value: &str) -> Vec<u8> {
        let mut content = Oid::from(oid).unwrap().to_der_vec().unwrap();
        content.extend(der(tag.0 as u8, value.as_bytes()));
        der(0x30, &content)
    }

    /// The subject made of these RDNs (each a set of attributes), in encoded order, rendered.
    fn rendered(rdns: &[&[Vec<u8>]]) -> String {
        let rdns: Vec<u8> = rdns
            .iter()
            .flat_map(|rdn| der(0x31, &rdn.concat()))
            .collect();
        let encoded = der(0x30, &rdns);
        let (rest, name) = X509Name::from_der(&encoded).unwrap();
        assert!(rest.is_empty());
        rfc2253(&name).unwrap()
    }

    fn cn(value: &str) -> Vec<u8> {
        attr(CN, Tag::Utf8String, value)
    }

    fn org(value: &str) -> Vec<u8> {
        attr(O, Tag::PrintableString, value)
    }

    #[test]
    fn subjects_are_rendered_as_java_renders_them() {
        let cases: [(&[&[Vec<u8>]], &str); 10] = [
            (&[&[org("example")], &[cn("alice")]], "CN=alice,O=example"),
            (&[&[cn("a+b")]], r"CN=a\+b"),
            (&[&[cn("a=b")]], r"CN=a\=b"),
            (&[&[cn("\"quoted\"")]], r#"CN=\"quoted\""#),
            (&[&[cn(r"<a>;b\c#d")]], r"CN=\<a\>\;b\\c\#d"),
            (&[&[cn("#lead")]], r"CN=\#lead"),
            (&[&[cn("  two sides ")]], r"CN=\ \ two sides\ "),
            (&[&[cn("  ")]], r"CN=\ \ "),
            // A multi-valued RDN: its attributes in encoded order, joined by '+'.
            (
                &[
                    &[org("example")],
                    &[cn("a,b"), attr(UID, Tag::Utf8String, "7")],
                ],
                r"CN=a\,b+UID=7,O=example",
            ),
            // A type without an RFC 2253 keyword: dotted OID, the value's DER in hex.
            (
                &[&[attr(EMAIL, Tag::Ia5String, "a@b")], &[cn("x")]],
                "CN=x,1.2.840.113549.1.9.1=#1603614062",
            ),
        ];
        for (rdns, expected) in cases {
            assert_eq!(rendered(rdns), expected);
        }
    }

    #[test]
    fn a_common_name_that_spells_another_subject_stays_one_value() {
        // The super user is User:CN=ops,O=example; this certificate has only a CN.
        let spoof = rendered(&[&[cn("ops,O=example")]]);
        assert_eq!(spoof, r"CN=ops\,O\=example");
        assert_ne!(spoof, rendered(&[&[org("example")], &[cn("ops")]]));
    }
}
