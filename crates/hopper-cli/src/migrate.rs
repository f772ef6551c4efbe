//! `hopper migrate`: bring a SQL broker's schema up to this build's version.

use std::process::ExitCode;

use hopper::Result;

/// Applies what is missing and says how many migrations ran.
pub async fn run(url: &str) -> Result<ExitCode> {
    let applied = hopper::migrate(url).await?;
    let shown = hopper::redact_url(url);
    match applied {
        0 => println!("{shown}: schema up to date"),
        n => println!(
            "{shown}: applied {n} migration{}",
            if n == 1 { "" } else { "s" }
        ),
    }
    Ok(ExitCode::SUCCESS)
}
