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
