package wire

import (
	"net"
	"time"
)

// dialKeepAlive probes an idle TCP connection to a worker after 5 s
// without traffic, every 2 s, and drops it after 3 unanswered probes: a
// worker whose host vanished (killed container, cut network) sends no
// reset, and Go's default (15 s, then 9 probes 15 s apart) would keep a
// caller's connection to it for two and a half minutes. The driver's call
// watcher (runtime/driver/watch.go) is the first line; this one needs no
// cluster.
var dialKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}
