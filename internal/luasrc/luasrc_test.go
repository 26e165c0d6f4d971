package luasrc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const lib = `-- a comment
local function a(x)
  return b(x) + 1
end

-- another
local function b(x)
  return x
end

local function c()
  return REPLY_OK
end
`

// TestAssemble: a script gets the functions it calls and theirs, in the
// library's order, without the library's comments, and its constants
// written in; an unknown constant is an error.
func TestAssemble(t *testing.T) {
	consts := func(n string) (string, bool) { return map[string]string{"REPLY_OK": "1"}[n], n == "REPLY_OK" }
	src, err := Assemble(lib, "return a(2)\n", consts)
	require.NoError(t, err)
	assert.Equal(t, "local function a(x)\n  return b(x) + 1\nend\nlocal function b(x)\n  return x\nend\nreturn a(2)\n", src)
	src, err = Assemble(lib, "return c()\n", consts)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(src, "local function c()\n  return 1\nend\n"), src)
	assert.NotContains(t, src, "function a")
	src, err = Assemble(lib, "return 1\n", consts)
	require.NoError(t, err)
	assert.Equal(t, "return 1\n", src, "a script that calls nothing gets nothing")
	_, err = Assemble(lib, "return REPLY_NOPE\n", consts)
	assert.ErrorContains(t, err, "REPLY_NOPE")
}

// TestAssembleMarker: the functions only the code after a Marker line calls
// are defined at the line, the others (and what they call) in front; a
// body with two markers is an error.
func TestAssembleMarker(t *testing.T) {
	consts := func(n string) (string, bool) { return map[string]string{"REPLY_OK": "1"}[n], n == "REPLY_OK" }
	src, err := Assemble(lib, "if x then return b(1) end\n"+Marker+"return a(2) + c()\n", consts)
	require.NoError(t, err)
	assert.Equal(t, "local function b(x)\n  return x\nend\n"+
		"if x then return b(1) end\n"+
		"local function a(x)\n  return b(x) + 1\nend\nlocal function c()\n  return 1\nend\n"+
		"return a(2) + c()\n", src)
	src, err = Assemble(lib, "return 1\n"+Marker+"return 2\n", consts)
	require.NoError(t, err)
	assert.Equal(t, "return 1\nreturn 2\n", src, "a marker with nothing to define leaves nothing")
	src, err = Assemble(lib, "-- see the --@lib\n-- line\nreturn c()\n", consts)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(src, "local function c()"), "a marker in a comment's text is no marker: %s", src)
	_, err = Assemble(lib, Marker+"return c()\n"+Marker, consts)
	assert.ErrorContains(t, err, "more than one")
}
