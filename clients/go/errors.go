package tern

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Error is an error answer from Tern: {"error": {"code", "message", ...details}}.
// Status is 0 when no answer came (ErrUnreachable).
type Error struct {
	Status  int
	Code    string
	Message string
	// Details holds the error object's other fields (current_version, position, ...).
	Details map[string]any
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// The kinds of error a program branches on, for errors.Is.
var (
	ErrBadRequest       = errors.New("tern: bad request (400)")
	ErrUnauthenticated  = errors.New("tern: unauthenticated (401)")
	ErrPermissionDenied = errors.New("tern: permission denied (403)")
	ErrNotFound         = errors.New("tern: not found (404)")
	ErrConditionFailed  = errors.New("tern: condition failed (409, 412)")
	ErrRateLimited      = errors.New("tern: rate limited (429)")
	ErrUnavailable      = errors.New("tern: unavailable (503)")
	ErrUnreachable      = errors.New("tern: unreachable (no answer)")
)

// Is makes errors.Is(err, ErrNotFound) and the like work on an *Error.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Status == 400
	case ErrUnauthenticated:
		return e.Status == 401
	case ErrPermissionDenied:
		return e.Status == 403
	case ErrNotFound:
		return e.Status == 404
	case ErrConditionFailed:
		return e.Status == 409 || e.Status == 412
	case ErrRateLimited:
		return e.Status == 429
	case ErrUnavailable:
		return e.Status == 503
	case ErrUnreachable:
		return e.Status == 0
	}
	return false
}

// errorFrom reads an error answer, whatever its body holds.
func errorFrom(status int, body []byte) *Error {
	var answer struct {
		Error map[string]any `json:"error"`
	}
	if json.Unmarshal(body, &answer) == nil && answer.Error != nil {
		if code, ok := answer.Error["code"].(string); ok {
			message, _ := answer.Error["message"].(string)
			details := map[string]any{}
			for k, v := range answer.Error {
				if k != "code" && k != "message" {
					details[k] = v
				}
			}
			return &Error{Status: status, Code: code, Message: message, Details: details}
		}
	}
	text := string(body)
	if len(text) > 200 {
		text = text[:200]
	}
	return &Error{Status: status, Code: "http_error", Message: text}
}
