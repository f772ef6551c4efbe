//! The dashboard's API over real HTTP on 127.0.0.1, against real brokers.

mod web {
    mod api;
    mod browser;
    mod fetching;
    mod groups;
    mod pages;
    mod rabbitmq;
    mod schema;
    mod security;
    mod support;
}
