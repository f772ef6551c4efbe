// The broker behaviour suite, run against the memory broker.
