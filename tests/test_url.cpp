// Connection URLs: tensorcom's schemes, plain endpoints, brace expansion.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/url.hpp>

using namespace tenbin;
using test_support::error_class;
using test_support::error_text;
using strings = std::vector<std::string>;

TEST_CASE("braces expand like Python's braceexpand") {
    CHECK(brace_expand("plain") == strings{"plain"});
    CHECK(brace_expand("a{1..3}") == strings{"a1", "a2", "a3"});
    CHECK(brace_expand("{x,y}z") == strings{"xz", "yz"});
    CHECK(brace_expand("{a,b}{1,2}") == strings{"a1", "a2", "b1", "b2"});
    CHECK(brace_expand("h{a,b{1..2}}") == strings{"ha", "hb1", "hb2"});
    CHECK(brace_expand("{08..11}") == strings{"08", "09", "10", "11"});
    CHECK(brace_expand("{3..1}") == strings{"3", "2", "1"});
    CHECK(brace_expand("{0..10..5}") == strings{"0", "5", "10"});
    CHECK(brace_expand("{a..c}") == strings{"a", "b", "c"});
    CHECK(brace_expand("{-1..1}") == strings{"-1", "0", "1"});
    CHECK(brace_expand("{single}") == strings{"{single}"});
    CHECK(brace_expand("{,x}") == strings{"", "x"});
    CHECK(brace_expand("zsub://host:78{80..83}").size() == 4);
    CHECK(brace_expand("zsub://host:78{80..83}")[3] == "zsub://host:7883");
}

TEST_CASE("bad brace patterns are refused, not expanded without bound") {
    CHECK(error_class([] { (void)brace_expand("a{1,2"); }) == "bad_url");
    CHECK(error_class([] { (void)brace_expand("a}1"); }) == "bad_url");
    CHECK(error_class([] { (void)brace_expand("{1..1000000}"); }) == "bad_url");
    CHECK(error_class([] { (void)brace_expand("{1..300}{1..300}"); }) == "bad_url");
    CHECK(error_class([] { (void)brace_expand(std::string(40, '{') + std::string(40, '}')); }) == "bad_url");
    std::string many;
    for (int i = 0; i < 300; ++i) many += "{a}";
    CHECK(error_class([&] { (void)brace_expand(many); }) == "bad_url");
}

TEST_CASE("tensorcom schemes choose the socket and who binds") {
    struct row { const char* url; socket_kind kind; bool bind; const char* address; };
    const row rows[] = {
        {"zpush://host:7880", socket_kind::push, false, "tcp://host:7880"},
        {"zpull://*:7880", socket_kind::pull, true, "tcp://*:7880"},
        {"zpub://0.0.0.0:7880/", socket_kind::pub, true, "tcp://0.0.0.0:7880"},
        {"zsub://host:7880", socket_kind::sub, false, "tcp://host:7880"},
        {"zrpush://*:7880", socket_kind::push, true, "tcp://*:7880"},
        {"zrpull://host:7880", socket_kind::pull, false, "tcp://host:7880"},
        {"zrpub://host:7880", socket_kind::pub, false, "tcp://host:7880"},
        {"zrsub://*:7880", socket_kind::sub, true, "tcp://*:7880"},
        {"zpub+ipc:///tmp/x", socket_kind::pub, true, "ipc:///tmp/x"},
        {"zpush+inproc://name", socket_kind::push, false, "inproc://name"},
        {"zsub+tcp://[::1]:5555", socket_kind::sub, false, "tcp://[::1]:5555"},
    };
    for (const row& r : rows) {
        CAPTURE(r.url);
        const endpoint ep = parse_url(r.url);
        CHECK(ep.kind == r.kind);
        CHECK(ep.bind == r.bind);
        CHECK(ep.address == r.address);
    }
}

TEST_CASE("plain endpoints need a kind; options override binding") {
    CHECK(error_class([] { (void)parse_url("tcp://127.0.0.1:5555"); }) == "bad_url");
    const endpoint pull = parse_url("tcp://127.0.0.1:5555", {.kind = socket_kind::pull});
    CHECK(pull.bind);
    CHECK(pull.address == "tcp://127.0.0.1:5555");
    CHECK_FALSE(parse_url("ipc:///tmp/s", {.kind = socket_kind::push}).bind);
    CHECK(parse_url("zpush://h:1", {.bind = true}).bind);
    CHECK_FALSE(parse_url("zpull://h:1", {.bind = false}).bind);
    CHECK(parse_url("zpull://h:1", {.kind = socket_kind::pull}).kind == socket_kind::pull);
    CHECK(error_class([] { (void)parse_url("zpull://h:1", {.kind = socket_kind::push}); }) == "bad_url");
}

TEST_CASE("malformed URLs say what is wrong") {
    for (const char* bad : {"", "zpush", "://x", "zfoo://h:1", "zpush+udp://h:1", "zpush://", "zpush://host",
                            "zpush://host:", "zpush://:80", "zpush://h:1/path",
                            "zpush://h:99999", "zpush://h:65536", "zpush://h:-5", "zpush://h:abc", "zpush://h:+80",
                            "zpush://h:123456", "zpush://h: 80", "tcp+ipc://x", "zpub+ipc://"}) {
        CAPTURE(bad);
        CHECK(error_class([&] { (void)parse_url(bad, {.kind = socket_kind::push}); }) == "bad_url");
    }
    for (const char* good : {"zpush://h:0", "zpush://h:65535", "zpull://*:*", "zpush://[::1]:80"}) {
        CAPTURE(good);
        CHECK_NOTHROW(parse_url(good));
    }
    try {
        (void)parse_url("zpush://127.0.0.1:99999");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("port '99999' is not a number from 0 to 65535") != std::string::npos);
    }
    try {
        (void)parse_url("zfoo://h:1");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("unknown scheme 'zfoo'") != std::string::npos);
    }
}

TEST_CASE("a refused URL is quoted with its control bytes escaped and its length bounded") {
    // what() is read as a C string: a NUL in the URL must not cut the reason off.
    const std::string with_nul("//{0\0}{1..99999}", 16);
    const std::string text = error_text([&] { (void)brace_expand(with_nul); });
    CHECK(text.find("'//{0\\x00}{1..99999}'") != std::string::npos);
    CHECK(text.find("more than 65536") != std::string::npos);
    const std::string text2 = error_text([&] { (void)parse_url(std::string(5000, 'z') + "\n"); });
    CHECK(text2.size() < 400);
    CHECK(text2.find("(5001 bytes)") != std::string::npos);
}

TEST_CASE("URLs read as tensorcom's urlparse reads them: scheme case, #topic, path and query") {
    // urlparse lowercases the scheme; the address keeps its case.
    const endpoint upper = parse_url("ZPULL://Host:7880");
    CHECK(upper.kind == socket_kind::pull);
    CHECK(upper.address == "tcp://Host:7880");
    CHECK(parse_url("ZSub+IPC:///tmp/X").address == "ipc:///tmp/X");
    CHECK(parse_url("TCP://h:1", {.kind = socket_kind::push}).address == "tcp://h:1");

    // The fragment is the topic of a pub or sub socket, on every transport.
    const endpoint sub = parse_url("zsub://127.0.0.1:7880#train");
    CHECK(sub.address == "tcp://127.0.0.1:7880");
    CHECK(sub.topic == "train");
    CHECK(parse_url("zpub://*:7880/#eval").topic == "eval");
    CHECK(parse_url("zsub+ipc:///tmp/feed#t").address == "ipc:///tmp/feed");
    CHECK(parse_url("zsub+ipc:///tmp/feed#t").topic == "t");
    CHECK(parse_url("zsub://h:1#").topic.empty());
    CHECK(parse_url("zsub://h:1").topic.empty());
    const std::string on_push = error_text([] { (void)parse_url("zpush://h:1#train"); });
    CHECK(on_push.find("a #topic is for pub and sub sockets, not push") != std::string::npos);
    CHECK(error_class([] { (void)parse_url("zsub://h:1#a\nb"); }) == "bad_url");
    // A plain ZeroMQ endpoint is no URL: '#' stays in it.
    CHECK(parse_url("ipc:///tmp/a#b", {.kind = socket_kind::sub}).address == "ipc:///tmp/a#b");

    // What tensorcom would silently drop is refused, saying so.
    const std::string path = error_text([] { (void)parse_url("zpush://h:7880/feed"); });
    CHECK(path.find("a tcp address takes no path ('/feed'): tensorcom would ignore it and use tcp://h:7880") !=
          std::string::npos);
    const std::string query = error_text([] { (void)parse_url("zsub://h:7880?hwm=10#t"); });
    CHECK(query.find("a query ('?hwm=10') is no part of a ZeroMQ address: tensorcom would drop it silently and "
                     "use tcp://h:7880") != std::string::npos);
    CHECK(error_class([] { (void)parse_url("zpull+ipc:///tmp/x?a"); }) == "bad_url");
}

TEST_CASE("many URLs make endpoints of one socket") {
    const strings urls{"zsub://host:78{80..82}", "zsub+ipc:///tmp/feed"};
    const auto eps = parse_urls(urls);
    REQUIRE(eps.size() == 4);
    CHECK(eps[0].address == "tcp://host:7880");
    CHECK(eps[2].address == "tcp://host:7882");
    CHECK(eps[3].address == "ipc:///tmp/feed");
    CHECK(error_class([] { (void)parse_urls(strings{"zsub://h:1", "zpush://h:2"}); }) == "bad_url");
    CHECK(error_class([] { (void)parse_urls(strings{}); }) == "bad_url");
    // One socket, one topic.
    CHECK(parse_urls(strings{"zsub://h:{1,2}#t"})[1].topic == "t");
    CHECK(error_text([] { (void)parse_urls(strings{"zsub://h:1#a", "zsub://h:2#b"}); })
              .find("the URLs of one connection share one topic") != std::string::npos);
    // One socket may bind some endpoints and connect others.
    const auto mixed = parse_urls(strings{"zsub://h:1", "zrsub://*:2"});
    CHECK_FALSE(mixed[0].bind);
    CHECK(mixed[1].bind);
}

TEST_CASE("socket kinds by name") {
    CHECK(parse_socket_kind("PUSH") == socket_kind::push);
    CHECK(parse_socket_kind("router") == socket_kind::router);
    CHECK_FALSE(parse_socket_kind("xpub"));
    CHECK(name(socket_kind::dealer) == "dealer");
    CHECK(binds_by_default(socket_kind::pull));
    CHECK_FALSE(binds_by_default(socket_kind::push));
}

TEST_CASE("peer_needed says what a socket needs at the other end, for a message that nothing arrived") {
    CHECK(peer_needed(parse_url("zsub://h:1")) ==
          "this SUB socket connected to tcp://h:1 needs a PUB that binds there, and gets only what the PUB sends "
          "after it joined");
    CHECK(peer_needed(parse_url("zpull://h:2")) == "this PULL socket bound to tcp://h:2 needs a PUSH that connects there");
    CHECK(peer_needed(parse_url("zpub://h:3")).ends_with("and drops what it sends before a SUB joined (see wait_for)"));
    CHECK(peer_needed(parse_url("tcp://h:4", {.kind = socket_kind::req})).find("needs a REP or ROUTER that binds there") !=
          std::string::npos);
    for (socket_kind k : {socket_kind::push, socket_kind::pull, socket_kind::pub, socket_kind::sub, socket_kind::req,
                          socket_kind::rep, socket_kind::dealer, socket_kind::router, socket_kind::pair})
        CHECK(peer_kinds(k) != "?");
}

TEST_CASE("peer_needed of a socket's endpoints names the first and counts the rest") {
    const std::vector<endpoint> two = parse_urls(std::vector<std::string>{"zpull://h:1", "zpull://h:2"});
    CHECK(peer_needed(two) == "this PULL socket bound to tcp://h:1 (and 1 more) needs a PUSH that connects there");
    CHECK(peer_needed(std::span<const endpoint>()).empty());
}
