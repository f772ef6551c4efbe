//! The statements, one per file under `sql/`, with the schema spliced in once at connect.

macro_rules! statements {
    ($($name:ident),* $(,)?) => {
        /// Every statement of the broker, rendered for one schema.
        #[derive(Debug)]
        pub(crate) struct Sql {
            $(pub(crate) $name: String,)*
        }

        impl Sql {
            pub(crate) fn for_schema(schema: &str) -> Self {
                Sql {
                    $($name: statement(include_str!(concat!("../sql/", stringify!($name), ".sql")), schema),)*
                }
            }
        }
    };
}

statements!(
    enqueue,
    enqueue_unique,
    enqueue_unique_ordered,
    enqueue_rated,
    enqueue_ordered_rated,
    enqueue_ordered,
    unblock,
    unblock_stuck,
    claim,
    claim_keyed,
    settle,
    renew,
    cancel,
    job_lease,
    job_record,
    counts,
    dead_letters,
    purge,
    prune_completed,
    prune_unique,
    vacuum,
    vacuum_allowed,
    list_waiting,
    list_waiting_desc,
    list_leased,
    list_leased_desc,
    list_finished,
    list_finished_desc,
    retry_dead,
    discard_dead,
    pause,
    resume,
    set_rate_limit,
    lift_rate_limit,
    queues,
    queue_stats,
    heartbeat,
    deregister,
    workers,
    throughput,
    enqueue_group,
    enqueue_group_rated,
    group_seal,
    group_status,
    group_sweep,
);

/// A statement for `schema`: its text is the key of each connection's prepared-statement
/// cache. Safe to splice: the schema name was validated to a-z 0-9 _.
pub(crate) fn statement(template: &str, schema: &str) -> String {
    render(template, schema)
}

/// Splices a validated schema name into a statement.
pub(crate) fn render(template: &str, schema: &str) -> String {
    template.replace("{schema}", schema)
}
