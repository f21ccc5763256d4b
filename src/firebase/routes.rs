//! Firebase's paths on the listener: which requests are Firebase's, and
//! its routes as the edge describes them (for the front's table and the
//! test that walks it).

use axum::http::Method;

use crate::edge::{Route, RouteAccess};

/// Whether `path` is a Firebase REST path (`/{path}.json`): any path that
/// ends in `.json`, except under `/v1/`, which is always the native API's
/// (a record or route named `….json` included).
pub fn is_firebase_path(path: &str) -> bool {
    path.ends_with(".json") && !path.starts_with("/v1/")
}

/// Firebase's routes: every method on `/{path}.json` and the rules file
/// (`/.ws`, the realtime protocol, authenticates in its own messages).
pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for method in [Method::GET, Method::PUT, Method::PATCH, Method::POST, Method::DELETE] {
        routes.push(Route { method, path: "/{path}.json", access: RouteAccess::Scoped });
    }
    routes.push(Route { method: Method::GET, path: "/.settings/rules.json", access: RouteAccess::Scoped });
    routes.push(Route { method: Method::PUT, path: "/.settings/rules.json", access: RouteAccess::Scoped });
    routes
}

#[cfg(test)]
mod tests {
    use super::is_firebase_path;

    #[test]
    fn every_json_path_is_firebases_but_under_v1() {
        assert!(is_firebase_path("/.json"));
        assert!(is_firebase_path("/users/alice.json"));
        assert!(is_firebase_path("/.settings/rules.json"));
        assert!(is_firebase_path("/v1.json"), "a tree location named v1 is not a route");
        assert!(is_firebase_path("/demo/users.json"), "a tree location under demo");
        // A record whose key ends in .json is still a record, and /v1 is the API's.
        assert!(!is_firebase_path("/v1/ns/default/kv/config.json"));
        assert!(!is_firebase_path("/v1/openapi.json"));
        assert!(!is_firebase_path("/v1/anything.json"));
        assert!(!is_firebase_path("/metrics"));
    }
}
