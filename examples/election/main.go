// Command election runs three processes that elect a leader: the leader
// does the job (here, it prints a tick), the others wait. The parent kills
// the leader outright (SIGKILL: no release, no goodbye) twice; each time
// another process takes over once the dead leader's lease has run out, with
// a larger term (the fencing token), which the parent watches through
// Observe.
//
// It runs against an embedded miniredis by default, served on a 127.0.0.1
// port for the three child processes, or against the Redis server at
// REDIS_ADDR (for example REDIS_ADDR=127.0.0.1:6379).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

const (
	election = "example:scheduler"
	ttl      = time.Second // how long a dead leader blocks its successor
	children = 3
)

func main() {
	if id := os.Getenv("ELECTION_CANDIDATE"); id != "" {
		candidate(id, os.Getenv("REDIS_ADDR"))
		return
	}
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run() // listens on 127.0.0.1
		if err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		// miniredis counts TTLs down only when told: keep its clock going,
		// so that a killed leader's lease runs out.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					mr.FastForward(10 * time.Millisecond)
				}
			}
		}()
		addr = mr.Addr()
		fmt.Println("using an embedded miniredis at", addr, "(set REDIS_ADDR to use a real server)")
	} else {
		fmt.Println("using the Redis server at", addr)
	}
	parent(addr)
}

// parent starts the candidates, watches the election, and kills each of
// the first two leaders as soon as it is elected.
func parent(addr string) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := locker.Election(election).Observe(ctx)

	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	procs := map[int]*exec.Cmd{}
	for i := 1; i <= children; i++ {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "ELECTION_CANDIDATE="+strconv.Itoa(i), "REDIS_ADDR="+addr)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		procs[cmd.Process.Pid] = cmd
	}
	defer func() {
		for _, cmd := range procs {
			_ = cmd.Process.Signal(syscall.SIGTERM) // they resign and exit
			_ = cmd.Wait()
		}
	}()

	killed, lastTerm := 0, int64(0)
	for l := range leaders {
		if l.Term == 0 {
			fmt.Println("observer: no leader")
			continue
		}
		fmt.Printf("observer: leader %q, term %d (larger than %d: %t)\n", l.Value, l.Term, lastTerm, l.Term > lastTerm)
		lastTerm = l.Term
		if killed == children-1 {
			return
		}
		pid, err := strconv.Atoi(l.Value)
		if err != nil || procs[pid] == nil {
			continue
		}
		fmt.Printf("observer: killing the leader (pid %d) with SIGKILL\n", pid)
		_ = procs[pid].Process.Kill()
		_ = procs[pid].Wait()
		delete(procs, pid)
		killed++
	}
	fmt.Println("observer: gave up waiting")
}

// candidate campaigns until it leads, then does the job until it loses
// leadership or is told to stop.
func candidate(id, addr string) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	locker, err := redlock.NewLocker(client, redlock.WithTTL(ttl))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // resigns, if leading
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	e := locker.Election(election)
	for ctx.Err() == nil {
		// The value announces who leads: here the pid, for the parent.
		lead, err := e.Campaign(ctx, strconv.Itoa(os.Getpid()))
		if err != nil {
			return // ctx ended
		}
		fmt.Printf("candidate %s: I lead, term %d\n", id, lead.Token())
		tick := time.NewTicker(300 * time.Millisecond)
		for done := false; !done; {
			select {
			case <-tick.C:
				// The job: pass lead.Token() with every write, so that a
				// fence rejects this leader once a later one exists.
				fmt.Printf("candidate %s: working as leader, term %d\n", id, lead.Token())
			case <-lead.Done():
				fmt.Printf("candidate %s: leadership lost: %v\n", id, lead.Err())
				done = true
			case <-ctx.Done():
				_ = lead.Unlock(context.Background()) // resign: the next one leads at once
				done = true
			}
		}
		tick.Stop()
	}
}
