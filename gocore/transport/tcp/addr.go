package tcp

import (
	"fmt"
	"net"

	"github.com/mkernel/mkernel/gocore/transport"
)

// bindIP resolves Config.BindHost: an IP address, an interface name, or empty (the local
// address of the route to routeTo, else 127.0.0.1). It never returns an unspecified
// address: nothing is bound on every interface.
func bindIP(host, routeTo string) (net.IP, error) {
	if host == "" {
		if routeTo == "" {
			return net.IPv4(127, 0, 0, 1), nil
		}
		h, _, err := net.SplitHostPort(routeTo)
		if err != nil {
			h = routeTo
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			return ip, nil
		}
		// A UDP "connection" sends nothing; it only asks the kernel which source address
		// the route to routeTo uses.
		c, err := net.Dial("udp", net.JoinHostPort(h, "9"))
		if err != nil {
			return nil, fmt.Errorf("find the interface routing to %s: %w", routeTo, err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).IP, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return nil, fmt.Errorf("%w: bind address %s would listen on every interface; name one", transport.ErrInvalid, host)
		}
		return ip, nil
	}
	ifc, err := net.InterfaceByName(host)
	if err != nil {
		return nil, fmt.Errorf("%w: bind host %q is neither an IP address nor an interface: %w", transport.ErrInvalid, host, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of interface %s: %w", host, err)
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP, nil
		}
		if v6 == nil {
			v6 = ipn.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("%w: interface %s has no usable address", transport.ErrInvalid, host)
}
