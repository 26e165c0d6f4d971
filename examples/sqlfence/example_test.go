package sqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/redlockgo/redlock"
)

// fencedUpdate writes balance with token, and registers token as the row's
// fence at the same time. It reports false, changing nothing, when a newer
// token has already been registered: the caller's lock was superseded.
func fencedUpdate(ctx context.Context, db *sql.DB, id, balance, token int64) (bool, error) {
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = ?, fence_token = ? WHERE id = ? AND fence_token <= ?`,
		balance, token, id, token)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// register raises the row's fence to token at the start of a critical
// section, so that a stale holder's read-modify-write is caught at its write.
func register(ctx context.Context, db *sql.DB, id, token int64) (bool, error) {
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET fence_token = ? WHERE id = ? AND fence_token <= ?`, token, id, token)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func balance(ctx context.Context, db *sql.DB, id int64) int64 {
	var b int64
	if err := db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = ?`, id).Scan(&b); err != nil {
		log.Fatal(err)
	}
	return b
}

// Example: worker A stalls past its lease, worker B takes over and writes,
// and A's late write changes no row.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence_token INTEGER NOT NULL DEFAULT 0);
		INSERT INTO accounts (id, balance) VALUES (1, 100)`); err != nil {
		log.Fatal(err)
	}

	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	locker, err := redlock.NewLocker(client, redlock.WithTTL(time.Second), redlock.WithAutoRenew(false))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	a, err := locker.Lock(ctx, "account:1")
	if err != nil {
		log.Fatal(err)
	}
	if ok, err := register(ctx, db, 1, a.Token()); err != nil || !ok {
		log.Fatal("A could not register: ", err)
	}
	seenA := balance(ctx, db, 1)

	// A stalls; its lease runs out on the server (miniredis's clock is moved
	// on instead of waiting), and B gets the lock with a larger token.
	mr.FastForward(2 * time.Second)
	b, err := locker.Lock(ctx, "account:1")
	if err != nil {
		log.Fatal(err)
	}
	if ok, err := register(ctx, db, 1, b.Token()); err != nil || !ok {
		log.Fatal("B could not register: ", err)
	}
	ok, err := fencedUpdate(ctx, db, 1, balance(ctx, db, 1)+10, b.Token())
	fmt.Println("B writes 110:", ok, err)

	ok, err = fencedUpdate(ctx, db, 1, seenA-50, a.Token())
	fmt.Println("A wakes and writes 50:", ok, err)
	fmt.Println("balance:", balance(ctx, db, 1))
	// Output:
	// B writes 110: true <nil>
	// A wakes and writes 50: false <nil>
	// balance: 110
}
