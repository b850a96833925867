// Package deps holds no code: its test enforces the dependency direction of
// DESIGN §7 with `go list -deps`, so a wrong import fails the build instead
// of a review.
package deps
