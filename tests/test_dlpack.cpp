// DLPack both ways without copies: pointers, shapes, strides, dtypes, and
// when each deleter runs (after zero-copy sends over ZeroMQ, after received
// frames and mappings are handed on); refusals leave ownership with the
// caller.
#include "support.hpp"
#include "zmq_fixture.hpp"

#include <doctest/doctest.h>
#include <tenbin/dlpack.hpp>
#include <tenbin/io.hpp>
#include <tenbin/zmq.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace tenbin;
using namespace std::chrono_literals;
using test_support::counted_tensor;
using test_support::error_class;
using test_support::error_text;
using test_support::eventually;

namespace {

// A DLPack producer the test owns: its deleter only counts, so the test can
// look at the memory and the count afterwards.
struct producer {
    std::vector<std::int64_t> storage;  // 8-byte aligned
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;
    std::atomic<int> deleted{0};
    DLManagedTensor managed{};

    producer(DLDataType type, std::vector<std::int64_t> dims, std::size_t bytes = 0)
        : shape(std::move(dims)) {
        std::size_t n = 1;
        for (auto d : shape) n *= static_cast<std::size_t>(d < 0 ? 0 : d);
        if (!bytes) bytes = n * (type.bits / 8) * type.lanes;
        storage.resize(bytes / 8 + 1);
        auto* p = reinterpret_cast<unsigned char*>(storage.data());
        for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
        DLTensor& dl = managed.dl_tensor;
        dl.data = storage.data();
        dl.device = {kDLCPU, 0};
        dl.ndim = static_cast<int>(shape.size());
        dl.dtype = type;
        dl.shape = shape.data();
        dl.strides = nullptr;
        dl.byte_offset = 0;
        managed.manager_ctx = this;
        managed.deleter = [](DLManagedTensor* self) {
            static_cast<producer*>(self->manager_ctx)->deleted.fetch_add(1);
        };
    }
    producer(const producer&) = delete;
    producer& operator=(const producer&) = delete;

    const std::byte* bytes() const { return reinterpret_cast<const std::byte*>(storage.data()); }
    void set_strides(std::vector<std::int64_t> s) {
        strides = std::move(s);
        managed.dl_tensor.strides = strides.data();
    }
};

constexpr DLDataType f32{kDLFloat, 32, 1};

using test_zmq::make_socket;

}  // namespace

TEST_CASE("every dtype maps to its DLPack type and back") {
    struct expected { dtype t; std::uint8_t code; std::uint8_t bits; };
    const expected table[] = {
        {dtype::f2, kDLFloat, 16}, {dtype::f4, kDLFloat, 32}, {dtype::f8, kDLFloat, 64},
        {dtype::i1, kDLInt, 8},    {dtype::i2, kDLInt, 16},   {dtype::i4, kDLInt, 32},
        {dtype::i8, kDLInt, 64},   {dtype::u1, kDLUInt, 8},   {dtype::u2, kDLUInt, 16},
        {dtype::u4, kDLUInt, 32},  {dtype::u8, kDLUInt, 64},
    };
    CHECK(std::size(table) == std::size(all_dtypes));
    for (const auto& e : table) {
        CAPTURE(code(e.t));
        const DLDataType d = to_dlpack_dtype(e.t);
        CHECK(d.code == e.code);
        CHECK(d.bits == e.bits);
        CHECK(d.lanes == 1);
        CHECK(from_dlpack_dtype(d) == e.t);
    }
}

TEST_CASE("types the format cannot carry are refused as unsupported, naming the type") {
    const DLDataType refused[] = {
        {kDLComplex, 64, 1}, {kDLBfloat, 16, 1}, {6 /* kDLBool of DLPack 0.8 */, 8, 1},
        {kDLOpaqueHandle, 64, 1}, {kDLFloat, 8, 1}, {kDLInt, 1, 1}, {kDLUInt, 128, 1},
        {kDLFloat, 32, 4},
    };
    for (const DLDataType& d : refused) {
        CAPTURE(int(d.code));
        CAPTURE(int(d.bits));
        CHECK(error_class([&] { (void)from_dlpack_dtype(d); }) == "unsupported");
    }
    CHECK(error_text([] { (void)from_dlpack_dtype({kDLComplex, 64, 1}); }).find("complex64") != std::string::npos);
    CHECK(error_text([] { (void)from_dlpack_dtype({kDLFloat, 32, 4}); }).find("4 lanes") != std::string::npos);
}

TEST_CASE("to_dlpack shares the tensor's bytes and describes them in C order") {
    tensor t = tensor::zeros(dtype::i2, {2, 3, 4}, "x");
    const long uses = t.data().use_count();
    DLManagedTensor* mt = to_dlpack(t);
    REQUIRE(mt);
    const DLTensor& dl = mt->dl_tensor;
    CHECK(dl.data == t.data().data());
    CHECK(dl.byte_offset == 0);
    CHECK(dl.device.device_type == kDLCPU);
    CHECK(dl.device.device_id == 0);
    CHECK(dl.ndim == 3);
    CHECK(dl.dtype.code == kDLInt);
    CHECK(dl.dtype.bits == 16);
    CHECK(std::vector<std::int64_t>(dl.shape, dl.shape + 3) == std::vector<std::int64_t>{2, 3, 4});
    REQUIRE(dl.strides);
    CHECK(std::vector<std::int64_t>(dl.strides, dl.strides + 3) == std::vector<std::int64_t>{12, 4, 1});
    CHECK(t.data().use_count() == uses + 1);
    mt->deleter(mt);
    CHECK(t.data().use_count() == uses);
}

TEST_CASE("an exported tensor keeps its bytes alive until the deleter, which releases them once") {
    std::atomic<int> released{0};
    DLManagedTensor* mt = nullptr;
    {
        tensor t = counted_tensor(4096, released);
        mt = to_dlpack(t);
    }
    CHECK(released.load() == 0);
    const auto* p = static_cast<const unsigned char*>(mt->dl_tensor.data);
    CHECK(p[100] == test_support::counted_pattern(100));
    mt->deleter(mt);
    CHECK(released.load() == 1);
}

TEST_CASE("rank 0 and zero-size tensors export and import") {
    SUBCASE("rank 0") {
        tensor t = tensor::from_vector(std::vector<double>{2.5}, {}, "s");
        dlpack_ptr mt(to_dlpack(t));
        CHECK(mt->dl_tensor.ndim == 0);
        CHECK(*static_cast<const double*>(mt->dl_tensor.data) == 2.5);
        tensor back = from_dlpack(mt.release(), "s");
        CHECK(back.ndim() == 0);
        CHECK(back.count() == 1);
        CHECK(back.values<double>()[0] == 2.5);
        CHECK(back.data().data() == t.data().data());
    }
    SUBCASE("rank 0 from a producer") {
        producer p({kDLInt, 64, 1}, {});
        p.managed.dl_tensor.shape = nullptr;  // allowed for ndim 0
        {
            tensor t = from_dlpack(&p.managed);
            CHECK(t.ndim() == 0);
            CHECK(t.nbytes() == 8);
        }
        CHECK(p.deleted.load() == 1);
    }
    SUBCASE("zero-size dimension, any strides") {
        producer p(f32, {3, 0, 2});
        p.set_strides({5, 9, 77});
        {
            tensor t = from_dlpack(&p.managed);
            CHECK(t.shape() == shape_t{3, 0, 2});
            CHECK(t.nbytes() == 0);
        }
        CHECK(p.deleted.load() == 1);
        tensor e = tensor::zeros(dtype::u1, {0});
        dlpack_ptr mt(to_dlpack(e));
        CHECK(mt->dl_tensor.shape[0] == 0);
    }
}

TEST_CASE("from_dlpack views the producer's memory and calls its deleter exactly once, after the last user") {
    producer p(f32, {4, 5});
    p.managed.dl_tensor.byte_offset = 8;  // the tensor starts 8 bytes in
    p.shape = {4, 4};
    p.managed.dl_tensor.shape = p.shape.data();
    {
        tensor t = from_dlpack(&p.managed, "input");
        CHECK(t.dtype() == dtype::f4);
        CHECK(t.shape() == shape_t{4, 4});
        CHECK(t.info() == "input");
        CHECK(t.nbytes() == 64);
        CHECK(t.data().data() == p.bytes() + 8);
        CHECK(t.data().writable());
        tensor copy = t;
        buffer slice = t.data().slice(4, 4);
        t = tensor{};
        CHECK(p.deleted.load() == 0);
        copy = tensor{};
        CHECK(p.deleted.load() == 0);  // the slice still holds it
        CHECK(slice.data() == p.bytes() + 12);
    }
    CHECK(p.deleted.load() == 1);
}

TEST_CASE("strides equal to C order, or free on dimensions of size 1, are accepted") {
    producer p(f32, {2, 1, 3});
    p.set_strides({3, 999, 1});
    {
        tensor t = from_dlpack(&p.managed);
        CHECK(t.shape() == shape_t{2, 1, 3});
    }
    CHECK(p.deleted.load() == 1);
}

TEST_CASE("refusals throw unsupported or bad_argument and leave ownership with the caller") {
    SUBCASE("non-contiguous strides") {
        producer p(f32, {2, 3});
        p.set_strides({1, 2});  // a transposed view
        const std::string text = error_text([&] { (void)from_dlpack(&p.managed); });
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "unsupported");
        CHECK(text.find("non-contiguous") != std::string::npos);
        CHECK(text.find("stride 2 of dimension 1 should be 1") != std::string::npos);
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("padded rows") {
        producer p(f32, {2, 3});
        p.set_strides({4, 1});
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "unsupported");
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("complex dtype") {
        producer p({kDLComplex, 64, 1}, {3});
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "unsupported");
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("bfloat16") {
        producer p({kDLBfloat, 16, 1}, {3});
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "unsupported");
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("vector lanes") {
        producer p({kDLFloat, 32, 2}, {3});
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "unsupported");
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("GPU memory") {
        producer p(f32, {3});
        p.managed.dl_tensor.device = {kDLCUDA, 0};
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "unsupported");
        CHECK(error_text([&] { (void)from_dlpack(&p.managed); }).find("CUDA") != std::string::npos);
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("negative dimension") {
        producer p(f32, {3});
        p.shape[0] = -3;
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "bad_argument");
        CHECK(error_text([&] { (void)from_dlpack(&p.managed); }).find("from_dlpack: dimension 0 is -3") !=
              std::string::npos);
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("more bytes than memory holds, strides given or not") {
        for (const bool strided : {false, true}) {
            producer p({kDLUInt, 8, 1}, {3, std::int64_t{1} << 62}, 8);
            if (strided) p.set_strides({std::int64_t{1} << 62, 1});
            CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "bad_argument");
            CHECK(error_text([&] { (void)from_dlpack(&p.managed); }).find("more bytes than memory") != std::string::npos);
            CHECK(p.deleted.load() == 0);
        }
    }
    SUBCASE("bool and unknown type codes are named as such") {
        producer b({6, 8, 1}, {3});
        CHECK(error_text([&] { (void)from_dlpack(&b.managed); }).find("dtype bool (8 bits) has no") != std::string::npos);
        producer h({kDLOpaqueHandle, 64, 1}, {3});
        CHECK(error_text([&] { (void)from_dlpack(&h.managed); }).find("opaque handle (64 bits)") != std::string::npos);
        producer u({42, 16, 1}, {3});
        CHECK(error_text([&] { (void)from_dlpack(&u.managed); }).find("type code 42 (16 bits)") != std::string::npos);
    }
    SUBCASE("null data with elements") {
        producer p(f32, {3});
        p.managed.dl_tensor.data = nullptr;
        CHECK(error_class([&] { (void)from_dlpack(&p.managed); }) == "bad_argument");
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("an info the format cannot carry") {
        producer p(f32, {3});
        CHECK(error_class([&] { (void)from_dlpack(&p.managed, "much too long"); }) == "bad_argument");
        CHECK(p.deleted.load() == 0);
    }
    SUBCASE("null tensor") {
        CHECK(error_class([] { (void)from_dlpack(nullptr); }) == "bad_argument");
    }
    SUBCASE("the caller still owns it and can import it once fixed") {
        producer p(f32, {2, 3});
        p.set_strides({1, 2});
        CHECK_THROWS_AS(from_dlpack(&p.managed), error);
        p.set_strides({3, 1});
        { tensor t = from_dlpack(&p.managed); }
        CHECK(p.deleted.load() == 1);
    }
}

TEST_CASE("round trip: tenbin -> DLPack -> tenbin shares the same bytes") {
    for (dtype t : all_dtypes) {
        CAPTURE(code(t));
        tensor original = tensor::zeros(t, {3, 5}, "a");
        auto bytes = original.mutable_bytes();
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 3);
        tensor back = from_dlpack(to_dlpack(original), "b");
        CHECK(back.data().data() == original.data().data());
        CHECK(back.dtype() == t);
        CHECK(back.shape() == original.shape());
        CHECK(back.info() == "b");
        CHECK(back.view() == original.with_info("b").view());
    }
}

TEST_CASE("an imported tensor sent zero-copy over inproc is deleted once, after the receiver drops it") {
    zmq::context_t ctx;
    zmq::socket_t pull = make_socket(ctx, zmq::socket_type::pull);
    zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
    test_zmq::link(pull, push, test_zmq::transport::inproc);

    producer p(f32, {64, 256});  // 64 KiB: far above the copy threshold
    {
        tensor t = from_dlpack(&p.managed, "dl");
        send_options so;
        so.copy_threshold = 0;
        REQUIRE(zsend_multipart(push, {t}, so));
    }
    // Sent and dropped here; ZeroMQ (and then the receiver) holds it.
    std::this_thread::sleep_for(20ms);
    CHECK(p.deleted.load() == 0);
    {
        auto msg = zrecv(pull);
        REQUIRE(msg);
        REQUIRE(msg->tensors.size() == 1);
        const tensor& got = msg->tensors[0];
        CHECK(got.info() == "dl");
        CHECK(got.data().data() == p.bytes());  // inproc: the producer's memory itself
        CHECK(test_support::same_bytes(got.data().bytes(), {p.bytes(), got.nbytes()}));
        CHECK(p.deleted.load() == 0);
    }
    CHECK(eventually([&] { return p.deleted.load() == 1; }));
    std::this_thread::sleep_for(20ms);
    CHECK(p.deleted.load() == 1);
}

TEST_CASE("a received tensor exported to DLPack keeps its frame alive after the message is dropped") {
    SUBCASE("inproc: the frame is the sender's memory") {
        zmq::context_t ctx;
        zmq::socket_t pull = make_socket(ctx, zmq::socket_type::pull);
        zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
        test_zmq::link(pull, push, test_zmq::transport::inproc);
        std::atomic<int> released{0};
        {
            tensor t = counted_tensor(32768, released, nullptr, "frame");
            REQUIRE(zsend_multipart(push, {t}));
        }
        DLManagedTensor* mt = nullptr;
        {
            auto msg = zrecv(pull);
            REQUIRE(msg);
            mt = to_dlpack(msg->tensors.at(0));
        }
        std::this_thread::sleep_for(20ms);
        CHECK(released.load() == 0);
        const auto* q = static_cast<const unsigned char*>(mt->dl_tensor.data);
        CHECK(q[32767] == test_support::counted_pattern(32767));
        mt->deleter(mt);
        CHECK(eventually([&] { return released.load() == 1; }));
    }
    SUBCASE("tcp: the frame is a received message (ASan checks the reads)") {
        zmq::context_t ctx;
        zmq::socket_t pull = make_socket(ctx, zmq::socket_type::pull);
        zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
        pull.bind("tcp://127.0.0.1:*");
        push.connect(pull.get(zmq::sockopt::last_endpoint));
        std::vector<std::int32_t> values(10000);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i * 31);
        const std::vector<std::int32_t> expected = values;
        REQUIRE(zsend_multipart(push, {tensor::from_vector(std::move(values))}));
        dlpack_ptr mt;
        {
            auto msg = zrecv(pull);
            REQUIRE(msg);
            mt.reset(to_dlpack(msg->tensors.at(0)));
        }
        push.close();
        pull.close();
        ctx.close();
        REQUIRE(mt->dl_tensor.shape[0] == 10000);
        const auto* q = static_cast<const std::int32_t*>(mt->dl_tensor.data);
        CHECK(std::equal(expected.begin(), expected.end(), q));
    }
}

TEST_CASE("a memory-mapped tensor exported to DLPack keeps the mapping alive") {
    const test_support::temp_dir dir("tenbin-dlpack");
    const auto path = dir / "m.ten";
    std::vector<std::uint16_t> values(5000);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint16_t>(i * 5);
    const std::vector<std::uint16_t> expected = values;
    save(path, {tensor::from_vector(std::move(values), {50, 100}, "m")});
    dlpack_ptr mt;
    {
        auto loaded = load_mmap(path);
        REQUIRE(loaded.size() == 1);
        CHECK_FALSE(loaded[0].data().writable());
        // A round trip keeps the mapping read-only (writing would fault).
        tensor back = from_dlpack(to_dlpack(loaded[0]));
        CHECK_FALSE(back.data().writable());
        // Writing gives the tensor a copy of its own; the mapping is untouched.
        back.mutable_values<std::uint16_t>()[0] = 9;
        CHECK(back.data().data() != loaded[0].data().data());
        CHECK(loaded[0].values<std::uint16_t>()[0] == 0);
        const long uses = loaded[0].data().use_count();
        mt.reset(to_dlpack(loaded[0]));
        CHECK(loaded[0].data().use_count() == uses + 1);
        CHECK(mt->dl_tensor.data == loaded[0].data().data());
    }
    std::filesystem::remove(path);  // the mapping outlives the name
    CHECK(mt->dl_tensor.dtype.code == kDLUInt);
    CHECK(mt->dl_tensor.dtype.bits == 16);
    CHECK(mt->dl_tensor.strides[0] == 100);
    const auto* q = static_cast<const std::uint16_t*>(mt->dl_tensor.data);
    CHECK(std::equal(expected.begin(), expected.end(), q));
}
