// Sockets of the caller's: pyzmq sockets (by their libzmq handle, which
// tenbin/_sockets.py checks is of the same libzmq) and message sockets
// (SCTP, AF_UNIX SOCK_SEQPACKET) by their file descriptor.
#include "arrays.hpp"

#include <tenbin/sctp.hpp>
#include <tenbin/zmq.hpp>

#include <zmq.h>

#include <netdb.h>
#include <sys/un.h>

#include <cstring>

namespace tenbin_py {

namespace {

// ---- pyzmq ---------------------------------------------------------------

// A pyzmq socket, its libzmq handle, and the waits on it: in slices
// without the GIL, checking between slices for signals and for the socket
// closed meanwhile (pyzmq's `closed`).
class pyzmq_socket {
public:
    pyzmq_socket(py::object socket, std::uintptr_t handle) : socket_(std::move(socket)), handle_(handle) {
        check_open();
    }
    zmq::socket_ref ref() const { return zmq::socket_ref(zmq::from_handle, reinterpret_cast<void*>(handle_)); }

    // Waits until the socket has `events`, or its own timeout (`option`:
    // ZMQ_RCVTIMEO or ZMQ_SNDTIMEO, -1 = for ever) passed since the first
    // wait. False on timeout.
    bool wait(short events, int option) {
        if (!started_) {
            int ms = -1;
            std::size_t len = sizeof ms;
            if (zmq_getsockopt(ref().handle(), option, &ms, &len) != 0) throw zmq::error_t();
            deadline_ = deadline_after(ms < 0 ? std::nullopt : std::optional(std::chrono::milliseconds(ms)));
            started_ = true;
        }
        for (;;) {
            const auto slice = slice_until(deadline_);
            const int rc = without_gil([&] {
                zmq_pollitem_t item{ref().handle(), 0, events, 0};
                return zmq_poll(&item, 1, static_cast<long>(slice.count()));
            });
            if (rc > 0) return true;
            if (rc < 0 && zmq_errno() != EINTR) throw zmq::error_t();
            check_signals();
            check_open();
            if (clock_type::now() >= deadline_) return false;
        }
    }

private:
    void check_open() const {
        if (handle_ == 0 || py::bool_(socket_.attr("closed")))
            raise_error(tenbin::errc::closed, "the pyzmq socket is closed");
    }

    py::object socket_;
    std::uintptr_t handle_;
    clock_type::time_point deadline_;
    bool started_ = false;
};

void zsend(const py::object& socket, std::uintptr_t handle, const py::object& list, const py::object& infos,
           bool multipart) {
    drain_deferred();
    pyzmq_socket s(socket, handle);
    input_list in = inputs(list, multipart ? hold::send : hold::borrow, infos);
    for (;;) {
        const bool sent = without_gil([&] {
            tenbin::send_options o;
            o.flags = zmq::send_flags::dontwait;
            return multipart ? tenbin::zsend_multipart(s.ref(), in.tensors, o) : tenbin::zsend_single(s.ref(), in.tensors, o);
        });
        if (sent) return;
        if (!s.wait(ZMQ_POLLOUT, ZMQ_SNDTIMEO))
            raise_error(tenbin::errc::timeout, "the message could not be sent within the socket's send timeout "
                                               "(sndtimeo; no receiver?)");
    }
}

enum class form { any, single, multipart };

py::object zrecv(const py::object& socket, std::uintptr_t handle, const py::object& infos, const std::string& how) {
    drain_deferred();
    const form f = how == "single" ? form::single : how == "multipart" ? form::multipart : form::any;
    pyzmq_socket s(socket, handle);
    tenbin::recv_options o;
    o.flags = zmq::recv_flags::dontwait;
    o.decode = decode_opts(infos);
    for (;;) {
        auto m = without_gil([&] {
            return f == form::single      ? tenbin::zrecv_single(s.ref(), o)
                   : f == form::multipart ? tenbin::zrecv_multipart(s.ref(), o)
                                          : tenbin::zrecv(s.ref(), o);
        });
        if (m) return decoded(std::move(m->tensors), infos);
        if (!s.wait(ZMQ_POLLIN, ZMQ_RCVTIMEO))
            raise_error(tenbin::errc::timeout, "no message arrived within the socket's receive timeout (rcvtimeo)");
    }
}

// ---- message sockets -----------------------------------------------------

struct socket_address {
    sockaddr_storage storage{};
    socklen_t length = 0;
};

socket_address address_of(const py::object& dest, int family) {
    socket_address a;
    if (py::isinstance<py::str>(dest) || py::isinstance<py::bytes>(dest)) {
        const std::string path = py::isinstance<py::str>(dest) ? dest.cast<std::string>() : std::string(dest.cast<py::bytes>());
        sockaddr_un un{};
        if (path.size() >= sizeof un.sun_path) raise_error(tenbin::errc::bad_argument, "unix socket path too long");
        un.sun_family = AF_UNIX;
        std::memcpy(un.sun_path, path.data(), path.size());
        std::memcpy(&a.storage, &un, sizeof un);
        a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
        return a;
    }
    if (!py::isinstance<py::tuple>(dest) || py::len(dest) < 2)
        raise_error(tenbin::errc::bad_argument, "dest must be None, a (host, port) tuple or a unix socket path");
    auto t = dest.cast<py::tuple>();
    const std::string host = py::str(t[0]);
    const std::string port = py::str(t[1]);
    addrinfo hints{};
    hints.ai_family = family;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
        raise_error(tenbin::errc::bad_argument, "cannot resolve " + host + ": " + gai_strerror(rc));
    std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
    a.length = res->ai_addrlen;
    freeaddrinfo(res);
    return a;
}

}  // namespace

void bind_sockets(py::module_& m) {
    m.def("zmq_version", [] {
        int a, b, c;
        zmq_version(&a, &b, &c);
        return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
    });
    m.def("zsend", &zsend);
    m.def("zrecv", &zrecv);

    m.def("sctp_send", [](int fd, const py::object& dest, const py::object& l, const py::object& infos, int family) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        std::optional<socket_address> a;
        if (!dest.is_none()) a = address_of(dest, family);
        without_gil([&] {
            if (a) tenbin::sctp_send(fd, reinterpret_cast<const sockaddr*>(&a->storage), a->length, in.tensors);
            else tenbin::sctp_send(fd, in.tensors);
        });
    });
    m.def("sctp_recv", [](int fd, const py::object& infos, std::size_t maxsize) {
        drain_deferred();
        auto opt = decode_opts(infos);
        auto t = without_gil([&] { return tenbin::sctp_recv(fd, maxsize, opt); });
        return decoded(std::move(t), infos);
    });
}

}  // namespace tenbin_py
