// Package redisconn turns a configured Redis URL into a go-redis client: a
// single instance (*redis.Client) or a Redis Cluster (*redis.ClusterClient),
// both as redis.UniversalClient. It is the one place that decides which,
// so the gateway, the certificate storage and `config check` agree.
//
// A URL names a cluster when its mode is "cluster", or when the mode is
// empty and the URL lists several nodes in go-redis's cluster form:
//
//	redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000
//
// It must not touch anything but URL parsing, client construction and
// the timeouts of the gateway's Redis work (timeouts.go).
package redisconn

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The modes a caller passes (redis.mode in the configuration). The empty
// mode decides from the URL.
const (
	ModeSingle  = "single"
	ModeCluster = "cluster"
)

// Tuning applies to every client built: Timeout bounds each command's
// read and write, and four times Timeout each dial. A zero Tuning keeps
// go-redis's defaults and its retries.
type Tuning struct {
	// Timeout bounds one command; 0 keeps go-redis's defaults.
	Timeout time.Duration
	// NoRetries turns off go-redis's command retries and repeated dials:
	// the callers fall back instead of waiting.
	NoRetries bool
}

// IsCluster reports whether raw (with mode) names a Redis Cluster. raw is
// not checked; see Check.
func IsCluster(raw, mode string) bool {
	switch mode {
	case ModeCluster:
		return true
	case ModeSingle:
		return false
	}
	u, err := url.Parse(raw)
	return err == nil && u.Query().Has("addr")
}

// Check validates raw for mode and returns every problem, worded without
// ever echoing the URL (it may hold a password).
func Check(raw, mode string) error {
	if mode != "" && mode != ModeSingle && mode != ModeCluster {
		return fmt.Errorf("redisconn: mode must be empty, %q or %q", ModeSingle, ModeCluster)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("redisconn: is not a valid URL")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return errors.New("redisconn: must start with redis:// or rediss://")
	}
	var errs []error
	if u.Hostname() == "" {
		errs = append(errs, errors.New("must name a host, such as redis://127.0.0.1:6379/0"))
	}
	if port := u.Port(); port != "" {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			errs = append(errs, errors.New("port must be a number from 0 to 65535"))
		}
	}
	db, dbErr := DB(u)
	if dbErr != nil {
		errs = append(errs, dbErr)
	}
	cluster := IsCluster(raw, mode)
	switch {
	case cluster && dbErr == nil && db != 0:
		errs = append(errs, errors.New("a Redis Cluster has only database 0: the path must be empty or /0"))
	case !cluster && u.Query().Has("addr"):
		errs = append(errs, errors.New("lists several nodes (addr=), which needs redis.mode cluster (or no mode)"))
	}
	for _, a := range u.Query()["addr"] {
		host, port, err := splitHostPort(a)
		if err != nil || host == "" {
			errs = append(errs, errors.New("each addr= must be host:port"))
			break
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			errs = append(errs, errors.New("each addr= port must be a number from 0 to 65535"))
			break
		}
	}
	if len(errs) == 0 {
		// The URL's query options (dial_timeout=, ...) are go-redis's.
		if cluster {
			_, err = redis.ParseClusterURL(raw)
		} else {
			_, err = redis.ParseURL(raw)
		}
		if err != nil {
			errs = append(errs, errors.New("has a query option the Redis client does not accept"))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redisconn: %w", errors.Join(errs...))
	}
	return nil
}

// splitHostPort splits "host:port", refusing anything else.
func splitHostPort(a string) (host, port string, err error) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return "", "", errors.New("no port")
	}
	host = strings.TrimSuffix(strings.TrimPrefix(a[:i], "["), "]")
	return host, a[i+1:], nil
}

// DB returns the database number in a Redis URL's path (0 when there is
// none).
func DB(u *url.URL) (int, error) {
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(db)
	if err != nil || n < 0 || n > 1<<20 {
		return 0, errors.New("path must be empty or a database number, such as /0")
	}
	return n, nil
}

// New builds the client for raw (config.Redis.CacheTier picks the cache
// tier's). The caller closes the client.
func New(raw, mode string, tune Tuning) (redis.UniversalClient, error) {
	if err := Check(raw, mode); err != nil {
		return nil, err
	}
	if IsCluster(raw, mode) {
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, fmt.Errorf("redisconn: %w", err)
		}
		if tune.Timeout > 0 {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 4*tune.Timeout, tune.Timeout, tune.Timeout
		}
		if tune.NoRetries {
			o.MaxRetries = -1
			o.DialerRetries = 1
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("redisconn: %w", err)
	}
	if tune.Timeout > 0 {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 4*tune.Timeout, tune.Timeout, tune.Timeout
	}
	if tune.NoRetries {
		o.MaxRetries = -1 // never retry: the callers fall back instead
		// One dial attempt: go-redis otherwise dials 5 times 100ms apart, so
		// while Redis is down every command would wait out its whole
		// timeout before the caller could fall back.
		o.DialerRetries = 1
	}
	return redis.NewClient(o), nil
}
