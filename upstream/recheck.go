package upstream

import (
	"encoding/json"
	"fmt"

	"trendgate/api"
)

// Checked is what CheckBody learned from a body.
type Checked struct {
	// Empty marks an unknown-topic answer (empty data or summary).
	Empty bool
	// Generated is config.generated, 0 when absent.
	Generated int64
	// Topic and Bucket are config.topic and config.bucket, as the
	// upstream echoes them in whatsup and series answers; "" when absent.
	Topic, Bucket string
}

// CheckBody runs on body the validation every 200 body of endpoint e
// passes when it arrives, for a body that comes from elsewhere (a cache
// snapshot), and reads the request the body says it answers. The error
// wraps ErrBadResponse.
func CheckBody(e api.Endpoint, body []byte) (Checked, error) {
	c, err := checkBody(e, body)
	if err != nil {
		return Checked{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	out := Checked{Empty: c.empty, Generated: c.generated}
	if e == api.EndpointWhatsup || e == api.EndpointSeries {
		var v struct {
			Config struct {
				Topic  any `json:"topic"`
				Bucket any `json:"bucket"`
			} `json:"config"`
		}
		if json.Unmarshal(body, &v) == nil {
			out.Topic, _ = v.Config.Topic.(string)
			out.Bucket, _ = v.Config.Bucket.(string)
		}
	}
	return out, nil
}
