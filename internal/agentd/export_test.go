package agentd

// SetFreeSpace replaces the statfs(2) the agent's installer asks for free
// space (install.Fetcher.FreeSpace), so that tests can fill the disk.
func SetFreeSpace(a *Agent, free func(dir string) (uint64, error)) {
	a.installer.Fetcher.FreeSpace = free
}
