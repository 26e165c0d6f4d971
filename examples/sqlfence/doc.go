// Package sqlfence shows fencing tokens guarding rows of a SQL table: a
// fence_token column, and writes of the form
//
//	UPDATE accounts SET balance = ?, fence_token = ? WHERE id = ? AND fence_token <= ?
//
// that change no row when the token is stale. The example runs against an
// embedded pure-Go SQLite (modernc.org/sqlite); it is its own module so the
// library itself never depends on a SQL driver.
package sqlfence
