package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/internal/mariadbtest"
)

// Debian's packages the site needs. Debian's wordpress package needs
// php-xml and php-mbstring besides, or every XML-RPC call fails as not
// well formed.
var packages = []string{"mariadb-server", "nginx", "php-fpm", "php-mysql", "php-xml", "php-mbstring", "wordpress"}

const (
	wpRoot   = "/usr/share/wordpress"
	fpmBin   = "/usr/sbin/php-fpm8.2"
	nginxBin = "/usr/sbin/nginx"
	wpUser   = "bench"
	wpPass   = "bench-password-not-secret"
)

// ensurePackages installs what is missing, non-interactively.
func ensurePackages(install bool) error {
	missing := benchproc.MissingPackages(packages)
	if len(missing) > 0 && !install {
		return fmt.Errorf("missing packages %s (run with -install, or apt-get install -y them)", strings.Join(missing, " "))
	}
	return benchproc.InstallPackages(missing)
}

// site is WordPress on nginx and php-fpm with its database in datadir.
type site struct {
	name    string              // also the name of its Debian config file
	run     string              // sockets, configs, logs
	db      *mariadbtest.Server // the primary
	dbs     *databases
	fpm     *benchproc.Proc
	nginx   *benchproc.Proc
	addr    string // nginx, host:port
	cfgFile string // /etc/wordpress/config-<name>.php
}

// startSiteAt starts MariaDB on datadir (installing it first), php-fpm
// and nginx listening on addr, and installs WordPress.
//
// With replicas > 0 MariaDB replicates semi-synchronously to that many
// replicas (semisync.go).
func startSiteAt(ctx context.Context, name, run, datadir, addr string, fpmChildren, replicas int) (*site, error) {
	s := &site{name: name, run: run, cfgFile: "/etc/wordpress/config-" + name + ".php"}
	if err := os.MkdirAll(run, 0o755); err != nil {
		return s, err
	}
	dbs, err := startDatabases(ctx, run, datadir, replicas)
	s.dbs = dbs
	if err != nil {
		return s, err
	}
	s.db = dbs.primary
	if err := s.createDatabase(ctx); err != nil {
		return s, err
	}
	s.addr = addr
	if err := os.WriteFile(s.cfgFile, []byte(wpConfig(s.db.Socket, "http://"+addr)), 0o644); err != nil {
		return s, err
	}
	if err := s.startFPM(fpmChildren); err != nil {
		return s, err
	}
	if err := s.startNginx(ctx); err != nil {
		return s, err
	}
	return s, s.install(ctx)
}

// createDatabase creates WordPress's database and its user.
func (s *site) createDatabase(ctx context.Context) error {
	for _, q := range []string{"CREATE DATABASE wordpress", "CREATE USER 'wp'@'localhost' IDENTIFIED BY 'wp'",
		"GRANT ALL ON wordpress.* TO 'wp'@'localhost'"} {
		if _, err := s.db.DB.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// wpConfig is the site's WordPress config: the database on socket, the
// site at home.
func wpConfig(socket, home string) string {
	return fmt.Sprintf(`<?php
define('DB_NAME', 'wordpress');
define('DB_USER', 'wp');
define('DB_PASSWORD', 'wp');
define('DB_HOST', 'localhost:%s');
define('WP_HOME', '%s');
define('WP_SITEURL', '%s');
define('DISABLE_WP_CRON', true);
define('AUTOMATIC_UPDATER_DISABLED', true);
$table_prefix = 'wp_';
`, socket, home, home)
}

// startFPM starts php-fpm with children workers, listening on a socket in
// the run directory.
func (s *site) startFPM(children int) error {
	fpmConf := filepath.Join(s.run, "fpm.conf")
	conf := fmt.Sprintf(`[global]
pid = %[1]s/fpm.pid
error_log = %[1]s/fpm.log
daemonize = no
[wp]
user = root
group = root
listen = %[1]s/fpm.sock
listen.mode = 0666
pm = static
pm.max_children = %[2]d
catch_workers_output = yes
`, s.run, children)
	if err := os.WriteFile(fpmConf, []byte(conf), 0o644); err != nil {
		return err
	}
	var err error
	s.fpm, err = benchproc.Start(s.name+"/php-fpm", filepath.Join(s.run, "fpm.out"), nil, fpmBin, "-F", "-R", "-y", fpmConf)
	return err
}

// startNginx starts nginx serving WordPress on s.addr through php-fpm and
// waits until it listens.
func (s *site) startNginx(ctx context.Context) error {
	ngConf := filepath.Join(s.run, "nginx.conf")
	conf := fmt.Sprintf(`user root;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx.err;
daemon off;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	fastcgi_temp_path %[1]s/fastcgi;
	proxy_temp_path %[1]s/proxy;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	include /etc/nginx/mime.types;
	keepalive_requests 100000;
	server {
		listen %[2]s;
		root %[3]s;
		index index.php;
		location / { try_files $uri $uri/ /index.php?$args; }
		location ~ \.php$ {
			include /etc/nginx/fastcgi_params;
			fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
			fastcgi_param WORDPRESS_CONFIG %[4]s;
			fastcgi_pass unix:%[1]s/fpm.sock;
		}
	}
}
`, s.run, s.addr, wpRoot, s.name)
	if err := os.WriteFile(ngConf, []byte(conf), 0o644); err != nil {
		return err
	}
	var err error
	if s.nginx, err = benchproc.Start(s.name+"/nginx", filepath.Join(s.run, "nginx.out"), nil, nginxBin, "-c", ngConf); err != nil {
		return err
	}
	return benchproc.WaitListening(ctx, s.nginx, s.addr)
}

// install runs WordPress's installer through its own form.
func (s *site) install(ctx context.Context) error {
	form := url.Values{"weblog_title": {"pbfs bench"}, "user_name": {wpUser}, "admin_password": {wpPass},
		"admin_password2": {wpPass}, "pw_weak": {"1"}, "admin_email": {"bench@example.invalid"}, "blog_public": {"0"}}
	var last string
	for i := 0; i < 50; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+"/wp-admin/install.php?step=2", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			var n int
			if err = s.db.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM wordpress.wp_users").Scan(&n); err == nil && n == 1 {
				return nil
			}
			last = fmt.Sprintf("status %d, users: %v", resp.StatusCode, err)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("WordPress did not install: %s\nphp-fpm log:\n%s", last, tailFile(filepath.Join(s.run, "fpm.log"), 10))
}

// cpu is the CPU used so far by nginx with php-fpm (the web tier) and by
// mariadbd.
func (s *site) cpu() (web, db benchproc.CPU) {
	web = s.fpm.CPU().Plus(s.nginx.CPU())
	if s.dbs != nil {
		db, _ = s.dbs.cpu()
	}
	return web, db
}

// replicaCPU is the CPU semi-sync's replicas used so far.
func (s *site) replicaCPU() benchproc.CPU {
	if s.dbs == nil {
		return benchproc.CPU{}
	}
	_, r := s.dbs.cpu()
	return r
}

// stop stops the web tier and the database and removes the config file.
func (s *site) stop() []error {
	var errs []error
	for _, p := range []*benchproc.Proc{s.nginx, s.fpm} {
		if p != nil {
			if err := p.Stop(30 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if s.dbs != nil {
		errs = append(errs, s.dbs.stop()...)
	}
	os.Remove(s.cfgFile)
	return errs
}

func tailFile(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
