package projection

import "trendgate/api"

// Data is the limited projection of a configured route's answer: like the
// topics list's, only the top-level "data" array is kept, and each of its
// items keeps only the members named in fields; every other top-level
// member (config included) is dropped. It fails closed as Apply does: a
// body of another shape is an error, and an output that would carry a
// field not in fields is an error wrapping ErrLeak. body is never
// modified.
func Data(body []byte, fields []string) ([]byte, error) {
	p := &Projection{list: newProjSet(fields)}
	return p.Apply(apiList, body)
}

// apiList is the endpoint whose shape a route's limited answer has.
const apiList = api.EndpointList
