package nixtest

import "sync"

// AtMost runs f(0) … f(n-1), at most slots at once, as xargs -P would, and
// fails tb on the first error: the by-hand baselines of the benchmarks,
// one command per target.
func AtMost(tb TB, n, slots int, f func(int) error) {
	tb.Helper()
	sem := make(chan struct{}, slots)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatalf("%v", err)
		}
	}
}
