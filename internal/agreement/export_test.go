package agreement

// WordLoop is the words loop (wordLoop) for the external tests.
func WordLoop(keeps bool) string { return wordLoop(keeps) }
