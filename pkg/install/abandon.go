package install

import "context"

// abandonable derives a context that is cancelled, with ErrAbandoned as the
// cause, when abandon is closed; stop releases it. A nil abandon never
// cancels.
func abandonable(ctx context.Context, abandon <-chan struct{}) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if abandon == nil {
		return ctx, func() { cancel(nil) }
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-abandon:
			cancel(ErrAbandoned)
		case <-done:
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		close(done)
		<-exited
		cancel(nil)
	}
}
