package auth_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"trendgate/auth"
)

// The auth stage of the gateway: parse the header, authenticate the token,
// and map the three outcomes to 400, 401 missing_api_key and
// 401 invalid_api_key, logging only the Reason.
func Example() {
	// A documentation-only key; configuration holds only its digest.
	const key = "tg_7NxO68Hbc0tjTvmeZGexIdZgvXoT2e7d7hE0rRFN4S824bBai"
	ring, err := auth.NewKeyring([]auth.KeySpec{
		{ID: "team-a", Digest: auth.Digest(key), Plan: "full"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, value := range []string{"Bearer " + key, "", "bearer tg_wrong", "Basic dXNlcjpwYXNz"} {
		h := http.Header{}
		if value != "" {
			h.Set("Authorization", value)
		}
		token, err := auth.ParseAuthorization(h)
		var p auth.Principal
		if err == nil {
			p, err = ring.Authenticate(token, now)
		}
		switch {
		case errors.Is(err, auth.ErrDuplicateHeader):
			fmt.Println("400")
		case errors.Is(err, auth.ErrMissingKey):
			fmt.Println("401 missing_api_key")
		case errors.Is(err, auth.ErrInvalidKey):
			fmt.Println("401 invalid_api_key, reason:", auth.ReasonOf(err))
		default:
			fmt.Println("ok:", p.KeyID, p.Plan)
		}
	}
	// Output:
	// ok: team-a full
	// 401 missing_api_key
	// 401 invalid_api_key, reason: malformed
	// 401 invalid_api_key, reason: malformed
}
