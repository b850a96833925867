package install_test

import "os/exec"

func osExec(path string) (string, error) {
	out, err := exec.Command(path).Output()
	return string(out), err
}
