// Package mariadbtest runs real MariaDB servers for tests: a data
// directory made by mariadb-install-db, a mariadbd on it listening only on
// a Unix socket, and a database/sql handle on it.
package mariadbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Available reports why MariaDB cannot run here, or nil. CI installs
// mariadb-server (.ci/run).
func Available() error {
	for _, b := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := lookPath(b); err != nil {
			return fmt.Errorf("%s not installed (apt-get install mariadb-server): %w", b, err)
		}
	}
	return nil
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Require fails the test when MariaDB is not installed: tests that need it
// are not optional (CI installs it).
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
}

// Install makes a fresh data directory in datadir (which may exist and be
// empty): system tables, root with an empty password.
func Install(t testing.TB, datadir string) {
	t.Helper()
	bin, _ := lookPath("mariadb-install-db")
	cmd := exec.Command(bin, "--no-defaults", "--datadir="+datadir, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
}

// Server is one running mariadbd.
type Server struct {
	Datadir string
	Socket  string
	Log     string // its error log
	DB      *sql.DB
	cmd     *exec.Cmd
	done    chan error
}

// Start runs mariadbd on datadir with args added to a minimal command
// line (no option files read), waits until it answers, and stops it at
// the end of the test. The socket and error log live in a directory of
// their own, off the data directory.
func Start(t testing.TB, datadir string, args ...string) *Server {
	t.Helper()
	s, err := StartErr(t.TempDir(), datadir, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// StartErr is Start without a test: run is a directory for the socket and
// log.
func StartErr(run, datadir string, args ...string) (*Server, error) {
	bin, err := lookPath("mariadbd")
	if err != nil {
		return nil, err
	}
	s := &Server{Datadir: datadir, Socket: filepath.Join(run, "m.sock"), Log: filepath.Join(run, "mariadbd.err"), done: make(chan error, 1)}
	argv := append([]string{"--no-defaults", "--datadir=" + datadir, "--socket=" + s.Socket, "--skip-networking",
		"--user=root", "--log-error=" + s.Log, "--pid-file=" + filepath.Join(run, "m.pid"), "--skip-name-resolve",
		"--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M"}, args...)
	s.cmd = exec.Command(bin, argv...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mariadbd: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", s.Socket
	cfg.Timeout = 5 * time.Second
	s.DB, err = sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		s.Kill()
		return nil, err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = s.DB.PingContext(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case werr := <-s.done:
			s.done <- werr
			return nil, fmt.Errorf("mariadbd exited at start (%v): %s", werr, s.tail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("mariadbd did not answer in 90 s: %v: %s", err, s.tail())
		}
	}
}

// DSN is a go-sql-driver DSN for database db on this server.
func (s *Server) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "unix", s.Socket, db
	cfg.Timeout = 5 * time.Second
	return cfg.FormatDSN()
}

// tail returns the end of the error log.
func (s *Server) tail() string {
	b, _ := os.ReadFile(s.Log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// ErrorLog returns the whole error log.
func (s *Server) ErrorLog() string { b, _ := os.ReadFile(s.Log); return string(b) }

// Kill kills mariadbd with SIGKILL (a crash) and waits for it.
func (s *Server) Kill() {
	if s.DB != nil {
		s.DB.Close()
	}
	s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// Stop shuts mariadbd down cleanly (SIGTERM), killing it after a minute.
func (s *Server) Stop() error {
	if s.DB != nil {
		s.DB.Close()
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return err
		}
		if err != nil && !strings.Contains(err.Error(), "signal") {
			return fmt.Errorf("mariadbd exited: %w: %s", err, s.tail())
		}
		return nil
	case <-time.After(time.Minute):
		s.Kill()
		return errors.New("mariadbd did not stop in a minute; killed")
	}
}

// Pid is mariadbd's process id (also its process group: it runs in a
// group of its own).
func (s *Server) Pid() int { return s.cmd.Process.Pid }
