package amqptest

// Reply is the answer to a management request: its status code and
// description, the error condition when it failed, and the body's value
// (nil: none).
type Reply struct {
	Code        int
	Description string
	Condition   string
	Value       any
}

// OK is a reply with status 200 and value.
func OK(value any) Reply { return Reply{Code: 200, Description: "OK", Value: value} }

// rpc answers a request sent on an RPC link: a put-token on $cbs (any
// token is accepted), else what the handler answers. The reply goes to
// the client's link whose target is the request's reply-to, with the
// request's message-id as its correlation-id and the status in
// status-code / status-description.
func (s *Server) rpc(l *Link, body []byte) {
	req, err := ParseMessage(body)
	if err != nil {
		return
	}
	var r Reply
	if op, _ := req.AppProps.Get("operation"); AsString(op) == "put-token" {
		r = Reply{Code: 202, Description: "Accepted"}
	} else {
		r = s.h.Request(l, req)
	}
	replyTo := AsString(Field(req.Props, 4))
	var out *Link
	for _, ss := range l.s.c.sessions {
		for _, x := range ss.links {
			if x.Kind == KindRPCOut && x.Target == replyTo && x.accepted {
				out = x
			}
		}
	}
	if out == nil {
		return
	}
	app := Map{{"status-code", int32(r.Code)}, {"status-description", r.Description}}
	if r.Condition != "" {
		app = append(app, KV{"error-condition", Symbol(r.Condition)})
	}
	e := Encoder{}
	e.Value(Perf(CodeProperties, nil, nil, nil, nil, nil, Field(req.Props, 0)))
	e.Value(Described{Desc: uint64(CodeAppProperties), Value: app})
	if r.Value != nil {
		e.Value(Described{Desc: uint64(CodeValue), Value: r.Value})
	}
	if out.credit == 0 {
		out.pendingRPC = append(out.pendingRPC, e.b)
		return
	}
	out.Transfer(nil, true, e.b)
}
