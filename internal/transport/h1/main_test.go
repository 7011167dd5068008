package h1_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// testLoops is the Loops of the servers the tests start. TestMain runs
// every test twice where event loops exist: with a goroutine per
// connection, then on two loops, since both must serve alike.
var testLoops int

func TestMain(m *testing.M) {
	code := m.Run()
	if code != 0 || runtime.GOOS != "linux" {
		os.Exit(code)
	}
	fmt.Println("h1: the tests again, on event loops (Server.Loops = 2)")
	testLoops = 2
	os.Exit(m.Run())
}
