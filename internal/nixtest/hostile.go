package nixtest

// Attack is what a hostile local user does at a path root is about to
// use, or has just used (see Hostile.Arm).
type Attack string
