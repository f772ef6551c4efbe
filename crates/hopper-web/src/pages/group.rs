//! `/groups/{group}`: a group of jobs, its members by outcome, the members that died, and
//! its completion job.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use hopper::GroupStatus;
use maud::{Markup, html};

use super::{PageError, PageResult, layout};
use crate::App;

/// `GET /groups/{group}`.
pub(crate) async fn group(State(app): State<Arc<App>>, Path(name): Path<String>) -> PageResult {
    hopper::group::validate_group(&name).map_err(hopper::Error::from)?;
    let Some(status) = app.broker.group(&name).await? else {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("no group named {name}"),
        ));
    };
    Ok(layout(&app, &format!("group {name}"), body(&status)))
}

/// The page of `group`, its name percent-encoded as one path segment: a group's name may
/// hold any character but NUL.
pub(crate) fn group_href(group: &str) -> String {
    let mut url = url::Url::parse("http://dashboard/groups/").expect("a valid URL");
    url.path_segments_mut()
        .expect("an http URL has segments")
        .pop_if_empty()
        .push(group);
    url.path().to_owned()
}

fn body(s: &GroupStatus) -> Markup {
    let (badge, state) = match (s.sealed, s.completion) {
        (_, Some(_)) => ("completed", "complete".to_owned()),
        (true, None) => ("leased", format!("sealed: {} to settle", s.unsettled())),
        (false, None) => ("pending", "open".to_owned()),
    };
    html! {
        h1 {
            "Group " (s.group)
            span class=(format!("badge {badge}")) #state { (state) }
        }
        section.panel {
            dl.fields {
                dt { "members" } dd #members { (s.members) }
                dt { "succeeded" } dd #succeeded { (s.succeeded) }
                dt { "dead" } dd #dead { (s.dead.len()) }
                dt { "cancelled" } dd #cancelled { (s.cancelled) }
                dt { "completion job" }
                dd {
                    @match s.completion {
                        Some(id) => a href=(format!("/jobs/{}", id.0)) { "job " (id.0) },
                        None => "not yet",
                    }
                }
            }
        }
        @if !s.dead.is_empty() {
            h2 { "Members that died" }
            ul.dead-members {
                @for id in &s.dead {
                    li { a href=(format!("/jobs/{}", id.0)) data-id=(id.0) { "job " (id.0) } }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_group_href_is_one_escaped_segment() {
        assert_eq!(super::group_href("import-7"), "/groups/import-7");
        assert_eq!(super::group_href("a/b ?c"), "/groups/a%2Fb%20%3Fc");
    }
}
