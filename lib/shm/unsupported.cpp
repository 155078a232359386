// Off Linux, +shm says it needs Linux.
#ifndef __linux__

#include "shm/internal.hpp"

namespace tenbin::detail {

std::shared_ptr<shm_sender> make_shm_sender(const shm_options&) {
    throw error(errc::unsupported, "the +shm transport needs Linux (memfd_create, SCM_RIGHTS)");
}
std::shared_ptr<shm_receiver> make_shm_receiver(const shm_options&) {
    throw error(errc::unsupported, "the +shm transport needs Linux (memfd_create, SCM_RIGHTS)");
}
tensor_pool& shm_pool(shm_sender&) { throw error(errc::unsupported, "+shm needs Linux"); }
bool shm_send(shm_sender&, zmq::socket_ref, tensor_span, std::span<const zmq::const_buffer>, const stream_position*,
              std::optional<std::chrono::milliseconds>) {
    throw error(errc::unsupported, "+shm needs Linux");
}
void shm_close(shm_sender&, std::chrono::milliseconds) {}
std::size_t shm_in_flight(shm_sender&) { return 0; }
shm_sender_counters shm_counters(shm_sender&) { return {}; }
shm_receiver_counters shm_counters(shm_receiver&) { return {}; }
std::uint64_t shm_quiet_claims() { return 0; }
std::optional<std::vector<tensor>> shm_receive(shm_receiver&, std::span<const zmq::message_t>,
                                               const decode_options&) {
    throw error(errc::unsupported, "+shm needs Linux");
}

}  // namespace tenbin::detail

#endif
