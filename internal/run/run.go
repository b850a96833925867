// Package run runs a daemon's loops together: the first to return ends the
// others, and nothing returns before every loop has.
package run

import "context"

// All runs every loop with a context that ends when ctx ends or any loop
// returns; it waits for all of them and returns the first one's result.
func All(ctx context.Context, loops ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(loops))
	for _, loop := range loops {
		go func() { errs <- loop(ctx) }()
	}
	err := <-errs
	cancel()
	for range len(loops) - 1 {
		<-errs
	}
	return err
}
