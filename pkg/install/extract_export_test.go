package install

// SetTestHookBeforeMarker lets the external tests look at a version dir
// between its rename and its marker. The returned func restores the hook;
// tests that set it must not run in parallel.
func SetTestHookBeforeMarker(f func(versionDir string)) (restore func()) {
	old := testHookBeforeMarker
	testHookBeforeMarker = f
	return func() { testHookBeforeMarker = old }
}

// SetTestHookStep calls f as each install step begins, once recorded. The
// returned func restores the hook; tests that set it must not run in
// parallel.
func SetTestHookStep(f func(Step)) (restore func()) {
	old := testHookStep
	testHookStep = f
	return func() { testHookStep = old }
}
