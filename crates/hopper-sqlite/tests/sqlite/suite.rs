//! The broker behaviour suite, one test per case, each on its own file.

hopper_testkit::broker_suite!(super::support::temp_broker);
