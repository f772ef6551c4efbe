//! The shared broker behaviour suite, each case in a database of its own.

hopper_testkit::broker_suite!(super::support::fresh);
