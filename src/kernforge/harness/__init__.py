"""harness: what capture and evaluate share to call an op on real tensors and time it honestly:
tensors as files (serialize), input sets and their layouts (inputs), one session of calls
(session: refilled and varied inputs, prefilled outputs, guards around each call, the clock),
timings and their verdicts (timing), and the machine's copy bandwidth (hardware). It imports
nothing of kernforge above it."""
