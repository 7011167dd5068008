package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// measureCluster starts two instances of setup ks in cluster mode on
// -redis, creates a key through A's key API and measures the answer and
// the time until B accepts the key; then it stops both and deletes every
// Redis key they wrote.
func (e *env) measureCluster(ctx context.Context, dir string, ks *keySet, col *column) {
	prefix := e.redisPrefix + strings.ReplaceAll(ks.name(), "/", "-") + ":"
	err := e.cluster(ctx, dir, ks, prefix, col)
	if err != nil {
		col.fail(rowCluster, err)
	}
	if err := cleanRedis(e.o.redisAddr, prefix); err != nil {
		fmt.Fprintf(os.Stderr, "scale: [%s] deleting the Redis keys %s*: %v\n", ks.name(), prefix, err)
	}
}

func (e *env) cluster(ctx context.Context, dir string, ks *keySet, prefix string, col *column) error {
	cdir := filepath.Join(dir, "cluster")
	if err := os.Mkdir(cdir, 0o700); err != nil {
		return err
	}
	var insts []*instance
	defer func() {
		for _, in := range insts {
			in.proc.stop(30 * time.Second)
		}
	}()
	for _, name := range []string{"a", "b"} {
		addrs, err := freeAddrs(2)
		if err != nil {
			return err
		}
		g := gatewayFile{
			listen: addrs[0], admin: addrs[1], upstream: e.upstreamURL,
			keysFile: filepath.Join(cdir, name+"-keys.yaml"),
			redisURL: "redis://" + e.o.redisAddr + "/0", redisPrefix: prefix, redisTimeout: e.o.redisTimeout,
		}
		path := filepath.Join(cdir, name+".yaml")
		if err := writeFile(path, ks.render(g)); err != nil {
			return err
		}
		inst, _, err := e.startGateway(ctx, cdir, "cluster-"+name, path, g)
		if err != nil {
			return fmt.Errorf("instance %s: %w", name, err)
		}
		insts = append(insts, inst)
	}
	a, b := insts[0], insts[1]
	ctx, cancel := context.WithTimeout(ctx, e.o.stepTimeout)
	defer cancel()
	began := time.Now()
	_, secret, err := createKey(ctx, a, ks, "cluster-created")
	created := time.Since(began)
	if err != nil {
		return fmt.Errorf("create on A, after %s: %w", ms(created), err)
	}
	col.value("cluster_create_seconds", created.Seconds())
	began = time.Now()
	for {
		status, _, err := get(ctx, b.api, b.base+listPath, secret)
		if err == nil && status == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("201 with its secret from A in %s, but B did not accept the key within %s", ms(created), e.o.stepTimeout)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("201 with its secret from A in %s, but B did not accept the key within %s", ms(created), e.o.stepTimeout)
		}
	}
	inForce := time.Since(began)
	col.value("cluster_in_force_seconds", inForce.Seconds())
	col.set(rowCluster, fmt.Sprintf("201 with its secret in %s; B accepts it %s later", ms(created), ms(inForce)))
	return nil
}

// cleanRedis deletes the keys under prefix in databases 0 and 1 (the
// counters, and the cache tier the gateway puts in the next database).
func cleanRedis(addr, prefix string) error {
	if !strings.HasPrefix(prefix, "tgscale:") {
		return errors.New("refusing to delete keys without the tgscale: prefix")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range []int{0, 1} {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
		err := func() error {
			defer c.Close()
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			var batch []string
			for iter.Next(ctx) {
				batch = append(batch, iter.Val())
				if len(batch) == 500 {
					if err := c.Unlink(ctx, batch...).Err(); err != nil {
						return err
					}
					batch = batch[:0]
				}
			}
			if err := iter.Err(); err != nil {
				return err
			}
			if len(batch) > 0 {
				return c.Unlink(ctx, batch...).Err()
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("database %d: %w", db, err)
		}
	}
	return nil
}
