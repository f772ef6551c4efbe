//! The shared broker behaviour suite.

hopper_testkit::broker_suite!(super::support::fresh);
