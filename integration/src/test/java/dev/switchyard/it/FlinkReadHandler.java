package dev.switchyard.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.apache.celeborn.common.network.client.RpcResponseCallback;
import org.apache.celeborn.common.network.client.TransportClient;
import org.apache.celeborn.common.network.protocol.BacklogAnnouncement;
import org.apache.celeborn.common.network.protocol.BufferStreamEnd;
import org.apache.celeborn.common.network.protocol.ReadData;
import org.apache.celeborn.common.network.protocol.RequestMessage;
import org.apache.celeborn.common.network.protocol.TransportMessage;
import org.apache.celeborn.common.network.protocol.TransportableError;
import org.apache.celeborn.common.network.server.BaseMessageHandler;
import org.apache.celeborn.common.protocol.MessageType;

/**
 * Celeborn's Flink {@code network/ReadClientHandler} (0.5.4), rewritten: dispatches the messages
 * the worker sends on a credit stream (READ_DATA 17, BACKLOG_ANNOUNCEMENT 19, TRANSPORTABLE_ERROR
 * 20, BUFFER_STREAM_END 21, and the same three as an RpcRequest carrying a TransportMessage) to the
 * consumer registered for the stream id, and reports a lost connection to every stream on it as
 * a TransportableError. Messages for stream ids with no consumer are dropped, as upstream; they
 * are counted here so that tests can assert that nothing arrives after a stream ended.
 */
public class FlinkReadHandler extends BaseMessageHandler {

  private final ConcurrentHashMap<Long, Consumer<RequestMessage>> streamHandlers = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<Long, TransportClient> streamClients = new ConcurrentHashMap<>();
  /** Messages that came for a stream id with no consumer (closed or never opened). */
  private final ConcurrentHashMap<Long, AtomicLong> unexpected = new ConcurrentHashMap<>();
  /** RpcRequests from the server whose TransportMessage type is not one of the three above. */
  private final AtomicLong unknownRpcs = new AtomicLong();

  public void registerHandler(long streamId, Consumer<RequestMessage> handle, TransportClient client) {
    streamHandlers.put(streamId, handle);
    streamClients.put(streamId, client);
  }

  public void removeHandler(long streamId) {
    streamHandlers.remove(streamId);
    streamClients.remove(streamId);
  }

  /** Messages for {@code streamId} that arrived while no consumer was registered for it. */
  public long unexpectedFor(long streamId) {
    AtomicLong n = unexpected.get(streamId);
    return n == null ? 0 : n.get();
  }

  public Map<Long, AtomicLong> unexpected() {
    return unexpected;
  }

  public long unknownRpcs() {
    return unknownRpcs.get();
  }

  private void processMessageInternal(long streamId, RequestMessage msg) {
    Consumer<RequestMessage> handler = streamHandlers.get(streamId);
    if (handler != null) {
      handler.accept(msg);
    } else {
      unexpected.computeIfAbsent(streamId, k -> new AtomicLong()).incrementAndGet();
      FlinkDriver.log("message %s for stream %d, which has no reader (dropped)", msg.type(), streamId);
    }
  }

  @Override
  public void receive(TransportClient client, RequestMessage msg, RpcResponseCallback callback) {
    // Upstream never answers the worker's RpcRequests (BUFFER_STREAM_END needs no reply).
    receive(client, msg);
  }

  @Override
  public void receive(TransportClient client, RequestMessage msg) {
    switch (msg.type()) {
      case READ_DATA:
        processMessageInternal(((ReadData) msg).getStreamId(), msg);
        break;
      case BACKLOG_ANNOUNCEMENT:
        processMessageInternal(((BacklogAnnouncement) msg).getStreamId(), msg);
        break;
      case TRANSPORTABLE_ERROR:
        processMessageInternal(((TransportableError) msg).getStreamId(), msg);
        break;
      case BUFFER_STREAM_END:
        processMessageInternal(((BufferStreamEnd) msg).getStreamId(), msg);
        break;
      case RPC_REQUEST:
        try {
          TransportMessage tm = TransportMessage.fromByteBuffer(msg.body().nioByteBuffer());
          int t = tm.getMessageTypeValue();
          if (t == MessageType.BACKLOG_ANNOUNCEMENT_VALUE) {
            receive(client, BacklogAnnouncement.fromProto(tm.getParsedPayload()));
          } else if (t == MessageType.BUFFER_STREAM_END_VALUE) {
            receive(client, BufferStreamEnd.fromProto(tm.getParsedPayload()));
          } else if (t == MessageType.TRANSPORTABLE_ERROR_VALUE) {
            receive(client, TransportableError.fromProto(tm.getParsedPayload()));
          } else {
            unknownRpcs.incrementAndGet();
            FlinkDriver.log("unexpected RpcRequest from the server: TransportMessage type %d", t);
          }
        } catch (IOException e) {
          unknownRpcs.incrementAndGet();
          FlinkDriver.log("cannot decode an RpcRequest from the server: %s", e);
        }
        break;
      case ONE_WAY_MESSAGE:
        break;
      default:
        FlinkDriver.log("unexpected message type %s: %s", msg.type(), msg);
    }
  }

  @Override
  public boolean checkRegistered() {
    return true;
  }

  @Override
  public void channelInactive(TransportClient client) {
    streamClients.forEach((streamId, savedClient) -> {
      if (savedClient == client) {
        String message = "Client " + client.getSocketAddress() + " is lost, notify related stream " + streamId;
        processMessageInternal(streamId, new TransportableError(streamId, message.getBytes(StandardCharsets.UTF_8)));
      }
    });
  }

  @Override
  public void exceptionCaught(Throwable cause, TransportClient client) {
    FlinkDriver.log("read connection %s: exception %s", client.getSocketAddress(), cause);
  }

  public void close() {
    streamHandlers.clear();
    for (TransportClient c : streamClients.values()) {
      c.close();
    }
    streamClients.clear();
  }
}
