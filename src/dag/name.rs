//! Node names ([`NodeName`]): the given name, or the default `kind#serial` written out only
//! when shown or compared.

/// A node's name, as [`Node::name`](super::Node::name) gives it: the one given with [`Dag::set_name`](super::Dag::set_name), or the
/// default `kind#serial` (the node's kind and serial number, [`NodeId::serial`](super::NodeId::serial)).
///
/// A default name is not stored: adding a node formats nothing, and the name is written out
/// only when it is shown ([`Display`](std::fmt::Display), `to_string`) or compared.
///
/// ```
/// # use cudagraph::Dag;
/// let mut dag = Dag::new();
/// let e = dag.add_empty();
/// assert_eq!(dag.node(e).unwrap().name(), "empty#0");
/// assert!(dag.node(e).unwrap().name().given().is_none());
/// dag.set_name(e, "join");
/// assert_eq!(dag.node(e).unwrap().name().given(), Some("join"));
/// ```
#[derive(Clone, Copy)]
pub struct NodeName<'a> {
    pub(in crate::dag) given: Option<&'a str>,
    pub(in crate::dag) kind: &'static str,
    pub(in crate::dag) serial: u64,
}

impl<'a> NodeName<'a> {
    /// The name given with [`Dag::set_name`](super::Dag::set_name), if any (`None`: the default name).
    pub fn given(&self) -> Option<&'a str> {
        self.given
    }

    /// The node's serial number (see [`NodeId::serial`](super::NodeId::serial)).
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// The name's text: the given name, or the default one written into `buf` (without
    /// `core::fmt`, which costs several times as much: a recording backend writes every
    /// node's name).
    fn text<'b>(&self, buf: &'b mut DefaultName) -> &'b str
    where
        'a: 'b,
    {
        if let Some(g) = self.given {
            return g;
        }
        let k = self.kind.len();
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = self.serial;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let len = k + 1 + digits.len() - at;
        buf[..k].copy_from_slice(self.kind.as_bytes());
        buf[k] = b'#';
        buf[k + 1..len].copy_from_slice(&digits[at..]);
        std::str::from_utf8(&buf[..len]).expect("a kind's name, `#` and digits are ASCII")
    }

    /// Appends the name's UTF-8 bytes to `out`.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.text(&mut [0; DEFAULT_NAME]).as_bytes());
    }

    /// Whether the name is `s` (a default name only in its canonical spelling: `kernel#7`,
    /// not `kernel#07`).
    fn is(&self, s: &str) -> bool {
        self.text(&mut [0; DEFAULT_NAME]) == s
    }
}

/// Room for a default name: a kind's name (at most 11 bytes, checked where the kinds are
/// registered), `#` and up to 20 digits.
pub(crate) const DEFAULT_NAME: usize = 32;
type DefaultName = [u8; DEFAULT_NAME];

impl std::fmt::Display for NodeName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.text(&mut [0; DEFAULT_NAME]))
    }
}

impl std::fmt::Debug for NodeName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.text(&mut [0; DEFAULT_NAME]))
    }
}

impl PartialEq for NodeName<'_> {
    fn eq(&self, other: &NodeName<'_>) -> bool {
        match (self.given, other.given) {
            (Some(a), _) => other.is(a),
            (None, Some(b)) => self.is(b),
            (None, None) => self.kind == other.kind && self.serial == other.serial,
        }
    }
}

impl Eq for NodeName<'_> {}

impl PartialEq<str> for NodeName<'_> {
    fn eq(&self, other: &str) -> bool {
        self.is(other)
    }
}

impl PartialEq<&str> for NodeName<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.is(other)
    }
}

impl PartialEq<String> for NodeName<'_> {
    fn eq(&self, other: &String) -> bool {
        self.is(other)
    }
}

impl PartialEq<NodeName<'_>> for String {
    fn eq(&self, other: &NodeName<'_>) -> bool {
        other.is(self)
    }
}

impl PartialEq<NodeName<'_>> for str {
    fn eq(&self, other: &NodeName<'_>) -> bool {
        other.is(self)
    }
}

impl PartialEq<NodeName<'_>> for &str {
    fn eq(&self, other: &NodeName<'_>) -> bool {
        other.is(self)
    }
}
