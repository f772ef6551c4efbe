//! `hopper group seal|show GROUP`: a group of jobs (enqueued with `hopper enqueue
//! --group`) closed with its completion job, or shown with how its members did.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use hopper::{GroupStatus, NewJob, Result};

use crate::enqueue::json_payload;

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Close a group: it takes no more members, and once every member has completed,
    /// died or been cancelled, a completion job goes to QUEUE (at once if all have). Its
    /// headers carry the counts: hopper-group, hopper-group-members, -succeeded, -dead,
    /// -cancelled.
    Seal(SealArgs),
    /// A group's members by outcome, the ids of those that died, and its completion job.
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct SealArgs {
    /// The group.
    group: String,
    /// The completion job's queue.
    queue: String,
    /// The completion job's payload, as JSON.
    #[arg(default_value = "{}")]
    payload: String,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The group.
    group: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(url: &str, command: GroupCommand) -> Result<ExitCode> {
    match command {
        GroupCommand::Seal(args) => {
            let payload = json_payload("PAYLOAD", &args.payload)?;
            let completion = NewJob::new(&args.queue, payload);
            hopper::group::validate_completion(&args.group, &completion)?;
            let broker = hopper::connect(url).await?;
            let status = broker.seal_group(&args.group, completion).await?;
            match status.completion {
                Some(id) => println!(
                    "{}: sealed; every member has settled: completion job {id}",
                    args.group
                ),
                None => println!(
                    "{}: sealed; the completion job follows the last of {} members",
                    args.group,
                    status.unsettled()
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::Show(args) => {
            hopper::group::validate_group(&args.group)?;
            let broker = hopper::connect(url).await?;
            let Some(status) = broker.group(&args.group).await? else {
                eprintln!("no group named {}", args.group);
                return Ok(ExitCode::FAILURE);
            };
            match args.json {
                true => println!("{}", json(&status)),
                false => print!("{}", text(&status)),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn text(s: &GroupStatus) -> String {
    let state = match (s.sealed, s.completion) {
        (_, Some(id)) => format!("complete: completion job {id}"),
        (true, None) => format!("sealed: {} members to settle", s.unsettled()),
        (false, None) => "open: not sealed yet".to_owned(),
    };
    let dead: Vec<String> = s.dead.iter().map(|id| id.to_string()).collect();
    format!(
        "group      {}\nstate      {state}\nmembers    {}\nsucceeded  {}\ndead       {}{}\ncancelled  {}\n",
        s.group,
        s.members,
        s.succeeded,
        s.dead.len(),
        match dead.is_empty() {
            true => String::new(),
            false => format!("  ({})", dead.join(", ")),
        },
        s.cancelled,
    )
}

fn json(s: &GroupStatus) -> serde_json::Value {
    serde_json::json!({
        "group": s.group,
        "members": s.members,
        "succeeded": s.succeeded,
        "dead": s.dead.iter().map(|id| id.0).collect::<Vec<_>>(),
        "cancelled": s.cancelled,
        "unsettled": s.unsettled(),
        "sealed": s.sealed,
        "completion": s.completion.map(|id| id.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopper::JobId;

    #[test]
    fn a_group_reads_as_text_and_json() {
        let mut status = GroupStatus {
            group: "import".into(),
            members: 3,
            succeeded: 1,
            dead: vec![JobId(7)],
            cancelled: 0,
            sealed: true,
            completion: None,
        };
        let shown = text(&status);
        assert!(
            shown.contains("state      sealed: 1 members to settle"),
            "{shown}"
        );
        assert!(shown.contains("dead       1  (7)"), "{shown}");
        status.succeeded = 2;
        status.completion = Some(JobId(9));
        assert!(text(&status).contains("complete: completion job 9"));
        let v = json(&status);
        assert_eq!(
            (v["dead"].clone(), v["unsettled"].clone()),
            (serde_json::json!([7]), serde_json::json!(0))
        );
        assert_eq!(v["completion"], 9);
    }
}
