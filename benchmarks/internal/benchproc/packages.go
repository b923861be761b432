package benchproc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// MissingPackages lists the Debian packages of pkgs that are not installed.
func MissingPackages(pkgs []string) []string {
	var missing []string
	for _, p := range pkgs {
		if exec.Command("dpkg-query", "-W", "-f=${Status}", p).Run() != nil {
			missing = append(missing, p)
		}
	}
	return missing
}

// InstallPackages installs pkgs with apt-get, non-interactively.
func InstallPackages(pkgs []string) error {
	if len(pkgs) == 0 {
		return nil
	}
	fmt.Println("installing", strings.Join(pkgs, " "))
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install: %v\n%s", err, out)
	}
	return nil
}
