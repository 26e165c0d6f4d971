// Package snippets holds the test that compiles the Go code of README.md
// and docs/*.md, so that a renamed or removed identifier fails CI instead
// of a newcomer's first try. It has no code of its own.
//
// A ```go block is a whole file (it starts with its package clause), or a
// fragment, marked by "// fragment" on its first line: statements, checked
// as the body of a function returning error, with the imports the docs use
// and the reader's own values (ctx, client, locker, lock, process...)
// declared in prelude.go.txt. A fragment may start with import lines of its
// own. Variables and imports a fragment leaves unused are allowed; nothing
// else is.
package snippets
