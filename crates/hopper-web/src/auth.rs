//! Who may call: the guard every request passes before its handler.
//!
//! - Bound to a loopback address without a token, only requests naming a loopback host
//!   (`Host: 127.0.0.1:…`, `localhost`, `[::1]`) are served, so a web page elsewhere cannot
//!   reach the dashboard through a DNS name it points at 127.0.0.1 (DNS rebinding).
//! - With a token, every request carries it: as `Authorization: Bearer TOKEN` (API
//!   clients), or as the session cookie the login form sets (pages).
//! - Every POST changes something: read-only mode refuses it (403), and otherwise it must
//!   carry the session's CSRF token in `x-hopper-csrf` (a page reads it from
//!   `/api/session`, which no other site's page can read), unless it carries the bearer
//!   token itself, which a browser never adds on its own.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};

use crate::App;
use crate::error::ApiError;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "hopper_session";

/// The header a state-changing request carries the CSRF token in.
pub const CSRF_HEADER: &str = "x-hopper-csrf";

/// 32 random bytes from the operating system, as hex.
pub fn secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares in time that depends on the lengths only, not on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// The value of cookie `name`, if sent.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether `host` (a `Host` header) names a loopback address.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The guard (see the module docs).
pub(crate) async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let by_bearer = match (&app.token, bearer(headers)) {
        (Some(token), Some(given)) => {
            if !same(token, given) {
                return refuse(StatusCode::UNAUTHORIZED, "wrong token");
            }
            true
        }
        _ => false,
    };
    let path = request.uri().path();
    // The login form and the stylesheet and script hold nothing of the broker's.
    let open_page = path == "/login" || path.starts_with("/assets/");
    match &app.token {
        Some(_) if !by_bearer && !open_page => {
            let session = cookie(headers, SESSION_COOKIE);
            if !session.is_some_and(|s| same(s, &app.session)) {
                if !path.starts_with("/api/") && request.method() == Method::GET {
                    return Redirect::to("/login").into_response();
                }
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "a token is needed: `Authorization: Bearer TOKEN`, or log in at /login",
                );
            }
        }
        Some(_) => {}
        None => {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
            if !host.is_some_and(loopback_host) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "only a loopback host name is served without a token",
                );
            }
        }
    }
    if request.method() == Method::POST && !open_page {
        if app.read_only {
            return refuse(StatusCode::FORBIDDEN, "read-only: no action is allowed");
        }
        let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !by_bearer && !csrf.is_some_and(|c| same(c, &app.csrf)) {
            return refuse(
                StatusCode::FORBIDDEN,
                "a state-changing request needs the x-hopper-csrf header from /api/session",
            );
        }
    }
    next.run(request).await
}

/// The login form's field.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Login {
    token: String,
}

const LOGIN_PAGE: &str = "<!doctype html><html lang=en><head><meta charset=utf-8>\
<meta name=viewport content=\"width=device-width,initial-scale=1\"><title>Log in · Hopper</title>\
<link rel=stylesheet href=/assets/app.css></head><body><form class=login method=post action=/login>\
<h1>Hopper</h1><label>Token <input type=password name=token autofocus required></label>\
<button>Log in</button></form></body></html>";

/// `GET /login`: the form.
pub(crate) async fn login_form() -> Html<&'static str> {
    Html(LOGIN_PAGE)
}

/// `POST /login`: with the right token, the session cookie (HttpOnly, SameSite=Strict) and
/// a redirect to the overview; with a wrong one, 401.
pub(crate) async fn login(State(app): State<Arc<App>>, Form(form): Form<Login>) -> Response {
    match &app.token {
        Some(token) if !same(token, &form.token) => refuse(StatusCode::UNAUTHORIZED, "wrong token"),
        _ => {
            let cookie = format!(
                "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
                app.session
            );
            (
                StatusCode::SEE_OTHER,
                [
                    (header::LOCATION, "/".to_owned()),
                    (header::SET_COOKIE, cookie),
                ],
            )
                .into_response()
        }
    }
}

fn refuse(status: StatusCode, why: &str) -> Response {
    let mut response = ApiError::new(status, why).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_told_apart() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "localhost",
            "[::1]:8080",
            "127.0.0.2",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in ["evil.example:8080", "10.0.0.1:8080", "[2001:db8::1]:80", ""] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "ab") && !same("", "a"));
        let (a, b) = (secret(), secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
