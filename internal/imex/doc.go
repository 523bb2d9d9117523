// Package imex holds the contract between the ComputeDomain daemon and the IMEX daemon it runs:
// rendering IMEX's configuration files (nodes.cfg, the hosts file, the imexd config), and
// supervising the IMEX process through one Interface with three implementations:
//
//   - Process from NewReal: the real nvidia-imex binary, with nvidia-imex-ctl -q as the
//     readiness query.
//   - Process from NewSimProcess: the simulated IMEX run as a child process (the imex-sim
//     binary, or any binary that calls SimMain), signalled with real SIGUSR1 and SIGTERM.
//   - Sim from NewSim: the simulated IMEX run in this process, goroutine-backed, reloaded by a
//     method call.
//
// The simulated IMEX keeps the real one's contract: it reads the same imexd config keys, parses
// nodes.cfg and the hosts file strictly (a bad line fails start and names the line), listens on
// BIND_INTERFACE_IP:SERVER_PORT, connects to every listed peer, answers the readiness query on
// IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT, re-reads its node list on reload, and can be made to
// crash on demand. Several simulated nodes share one machine by binding distinct loopback
// addresses (127.x.y.z) on the same ports.
package imex
