//! The query parameters of one Firebase request.

/// The query parameters of one request (URL-decoded; the last of a name wins).
pub(super) struct Query(pub Vec<(String, String)>);

impl Query {
    /// A request's few parameters, in order (a list: no hashing per request).
    pub(super) fn parse(raw: Option<&str>) -> Query {
        Query(form_urlencoded::parse(raw.unwrap_or("").as_bytes()).into_owned().collect())
    }
    /// The parameter's value; the last one when it is given more than once.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}
