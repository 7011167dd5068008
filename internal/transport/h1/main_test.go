package h1_test

import (
	"flag"
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
	if code != 0 || runtime.GOOS != "linux" || fuzzing() {
		os.Exit(code)
	}
	fmt.Println("h1: the tests again, on event loops (Server.Loops = 2)")
	testLoops = 2
	os.Exit(m.Run())
}

// fuzzing reports whether the run is fuzzing (-fuzz): the fuzz tests pick
// their servers' loops themselves, so a second pass would only fuzz twice.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}
