// The codec, Python streams and .ten files: encode_buffer / decode_buffer,
// encode_list / decode_list, write / read, save / load.
#include "arrays.hpp"

#include <tenbin/io.hpp>

#include <algorithm>
#include <cstring>

namespace tenbin_py {

namespace {

// Releases a memoryview handed to a stream, as Python's io does: later use
// of it raises ValueError. One the stream still exports (it made an array
// of it, say) stays valid, and so do views it derived: each keeps the
// memory's owner alive.
void release_view(const py::object& view) {
    if (!view || !PyMemoryView_Check(view.ptr())) return;
    if (PyObject* r = PyObject_CallMethod(view.ptr(), "release", nullptr)) {
        Py_DECREF(r);
    } else if (PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Clear();
    } else {
        throw py::error_already_set();
    }
}

// A memoryview of bytes [offset, offset + size) of `owner` (anything with
// the buffer protocol), which it keeps alive.
py::object view_of(PyObject* owner, std::size_t offset, std::size_t size, std::vector<py::object>& made) {
    py::object whole = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(owner));
    if (!whole) throw py::error_already_set();
    made.push_back(whole);
    py::object bytes = whole.attr("cast")("B");
    made.push_back(bytes);
    py::object part = bytes[py::slice(static_cast<py::ssize_t>(offset), static_cast<py::ssize_t>(offset + size), 1)];
    made.push_back(part);
    return part;
}

// The count a stream's write() or readinto() returned, checked against
// the bytes it was given.
std::size_t counted(const py::object& got, std::size_t given, const char* method) {
    if (!py::isinstance<py::int_>(got))
        raise_error(tenbin::errc::io_error, std::string("the stream's ") + method + "() returned a " +
                                                py::str(py::type::handle_of(got).attr("__name__")).cast<std::string>() +
                                                ", not a count of bytes");
    const long long k = got.cast<long long>();
    if (k < 0 || static_cast<unsigned long long>(k) > given)
        raise_error(tenbin::errc::io_error, std::string("the stream's ") + method + "() claims " +
                                                std::to_string(k) + " bytes of the " + std::to_string(given) +
                                                " it was given");
    return static_cast<std::size_t>(k);
}

// Writes to a Python binary stream. The bytes of an array go as a
// memoryview of that array (a stream that keeps it keeps the array alive);
// any other bytes (headers, padding) as a bytes object of their own.
class python_sink final : public tenbin::sink {
public:
    python_sink(const py::object& stream, const input_list& in) : write_(stream.attr("write")), in_(in) {}

    void write(std::span<const tenbin::bytes_view> pieces) override {
        for (auto p : pieces)
            if (!p.empty()) write_piece(p);
    }

private:
    void write_piece(tenbin::bytes_view p) {
        std::vector<py::object> made;
        py::object piece;
        for (const py::array& a : in_.arrays) {
            const auto* start = static_cast<const std::byte*>(a.data());
            if (p.data() >= start && p.data() + p.size() <= start + a.nbytes()) {
                piece = view_of(a.ptr(), static_cast<std::size_t>(p.data() - start), p.size(), made);
                break;
            }
        }
        if (!piece) piece = py::bytes(reinterpret_cast<const char*>(p.data()), p.size());
        try {
            // A raw stream may write part of it, and says how much.
            for (std::size_t done = 0; done < p.size();) {
                py::object part = done == 0 ? piece : piece[py::slice(static_cast<py::ssize_t>(done), static_cast<py::ssize_t>(p.size()), 1)];
                if (done != 0) made.push_back(part);
                py::object n = write_(part);
                if (n.is_none()) break;  // a write() that returns nothing took it all
                const std::size_t k = counted(n, p.size() - done, "write");
                if (k == 0)
                    raise_error(tenbin::errc::io_error, "the stream's write() wrote nothing of " +
                                                            std::to_string(p.size() - done) + " bytes");
                done += k;
            }
        } catch (...) {
            for (auto it = made.rbegin(); it != made.rend(); ++it) release_view(*it);
            throw;
        }
        for (auto it = made.rbegin(); it != made.rend(); ++it) release_view(*it);
    }

    py::object write_;
    const input_list& in_;
};

// Reads from a Python binary stream. readinto() gets a memoryview of a
// scratch bytearray of this reader's, never the memory the tensors are
// read into: a stream that keeps the view keeps the scratch alive and
// can change nothing else. The bytes are then copied where they belong.
class python_source final : public tenbin::source {
public:
    explicit python_source(const py::object& stream) {
        if (py::hasattr(stream, "readinto")) readinto_ = stream.attr("readinto");
        read_ = stream.attr("read");
    }

    std::size_t read_some(tenbin::mutable_bytes out) override {
        if (out.empty()) return 0;
        const std::size_t n = std::min(out.size(), max_piece);
        if (readinto_) {
            if (scratch_size_ < n) {
                // A new one: the old one may still be exported by the stream.
                scratch_ = py::reinterpret_steal<py::object>(PyByteArray_FromStringAndSize(nullptr, static_cast<py::ssize_t>(n)));
                if (!scratch_) throw py::error_already_set();
                scratch_size_ = n;
            }
            std::vector<py::object> made;
            py::object view = view_of(scratch_.ptr(), 0, n, made);
            py::object got;
            try {
                got = readinto_(view);
            } catch (...) {
                for (auto it = made.rbegin(); it != made.rend(); ++it) release_view(*it);
                throw;
            }
            for (auto it = made.rbegin(); it != made.rend(); ++it) release_view(*it);
            if (!got.is_none()) {  // None: a non-blocking stream has nothing now; read() says more
                const std::size_t k = counted(got, n, "readinto");
                std::memcpy(out.data(), PyByteArray_AS_STRING(scratch_.ptr()), k);
                return k;
            }
        }
        py::object b = read_(n);
        if (b.is_none()) return 0;
        py::buffer_info info = py::reinterpret_borrow<py::buffer>(b).request();
        const std::size_t k = static_cast<std::size_t>(info.size * info.itemsize);
        if (k > n)
            raise_error(tenbin::errc::io_error, "the stream's read(" + std::to_string(n) + ") returned " +
                                                    std::to_string(k) + " bytes");
        std::memcpy(out.data(), info.ptr, k);
        return k;
    }

private:
    static constexpr std::size_t max_piece = std::size_t{1} << 20;
    py::object readinto_;
    py::object read_;
    py::object scratch_;
    std::size_t scratch_size_ = 0;
};

}  // namespace

void bind_codec(py::module_& m) {
    m.def("encode_buffer", [](const py::object& l, const py::object& infos) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        const std::size_t n = tenbin::encoded_size(in.tensors);
        py::bytearray out(nullptr, 0);
        if (PyByteArray_Resize(out.ptr(), static_cast<py::ssize_t>(n)) != 0) throw py::error_already_set();
        auto* bytes = reinterpret_cast<std::byte*>(PyByteArray_AsString(out.ptr()));
        without_gil([&] { tenbin::encode_buffer_into(in.tensors, {bytes, n}); });
        return out;
    });
    m.def("decode_buffer", [](const py::object& buf, const py::object& infos) {
        drain_deferred();
        return decoded(tenbin::decode_buffer(buffer_of(buf), decode_opts(infos)), infos);
    });
    m.def("encode_list", [](const py::object& l, const py::object& infos) {
        drain_deferred();
        input_list in = inputs(l, hold::keep, infos);
        auto frames = tenbin::encode_list(in.tensors);
        py::list out;
        for (std::size_t i = 0; i < frames.size(); ++i) {
            if (i % 2 == 0) {
                out.append(py::bytes(reinterpret_cast<const char*>(frames[i].data()), frames[i].size()));
            } else {
                const auto& t = in.tensors[i / 2];
                out.append(array_of(tenbin::tensor(tenbin::dtype::u1, {static_cast<std::int64_t>(t.nbytes())}, t.data())));
            }
        }
        return out;
    });
    m.def("decode_list", [](const py::iterable& frames, const py::object& infos) {
        drain_deferred();
        std::vector<tenbin::buffer> bufs;
        for (py::handle h : frames) {
            py::object o = py::reinterpret_borrow<py::object>(h);
            if (py::hasattr(o, "buffer") && !PyObject_CheckBuffer(o.ptr())) o = o.attr("buffer");  // zmq.Frame
            bufs.push_back(buffer_of(o));
        }
        return decoded(tenbin::decode_list(bufs, decode_opts(infos)), infos);
    });
    m.def("write", [](const py::object& stream, const py::object& l, const py::object& infos) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        python_sink sink(stream, in);
        tenbin::write(sink, in.tensors);
    });
    m.def("read", [](const py::object& stream, std::size_t n, const py::object& infos) {
        drain_deferred();
        python_source source(stream);
        tenbin::read_options o;
        o.count = n;
        return decoded(tenbin::read(source, o), infos);
    });
    m.def("save", [](const std::string& path, const py::object& l, const py::object& infos, bool nocheck) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        tenbin::file_options o;
        o.nocheck = nocheck;
        without_gil([&] { tenbin::save(path, in.tensors, o); });
    });
    m.def("load", [](const std::string& path, const py::object& infos, bool nocheck, bool mmap) {
        drain_deferred();
        tenbin::file_options o;
        o.nocheck = nocheck;
        o.decode.expect_infos = decode_opts(infos).expect_infos;
        auto tensors = without_gil([&] { return mmap ? tenbin::load_mmap(path, o) : tenbin::load(path, o); });
        return decoded(std::move(tensors), infos);
    });
}

}  // namespace tenbin_py
