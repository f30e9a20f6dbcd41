package dev.switchyard.it;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.apache.celeborn.common.network.client.RpcResponseCallback;
import org.apache.celeborn.common.network.client.TransportClient;
import org.apache.celeborn.common.network.protocol.RequestMessage;
import org.apache.celeborn.common.network.protocol.TransportMessage;
import org.apache.celeborn.common.network.protocol.TransportableError;
import org.apache.celeborn.common.protocol.MessageType;
import org.apache.celeborn.common.protocol.PartitionLocation;
import org.apache.celeborn.common.protocol.PbBufferStreamEnd;
import org.apache.celeborn.common.protocol.PbOpenStream;
import org.apache.celeborn.common.protocol.PbReadAddCredit;
import org.apache.celeborn.common.protocol.PbStreamHandler;
import org.apache.celeborn.common.protocol.StreamType;
import org.apache.celeborn.shaded.io.netty.buffer.ByteBuf;

/**
 * Celeborn's Flink {@code readclient/CelebornBufferStream} (0.5.4), rewritten: one credit-based
 * stream over the locations (epochs) of one map partition, for the sub-partition range {@code
 * [subIndexStart, subIndexEnd]} (inclusive). OPEN_STREAM (TransportMessage 51, {@code
 * PbOpenStream} with initialCredit) as an async RPC; on the {@code PbStreamHandler} reply the
 * stream's buffer supplier and message consumer are registered; credit goes out as
 * READ_ADD_CREDIT (61, {@code PbReadAddCredit}); a BUFFER_STREAM_END from the worker moves to the
 * next location, and a stream is closed by sending BUFFER_STREAM_END (60, {@code
 * PbBufferStreamEnd{CreditStream}}) one-way.
 */
public class FlinkBufferStream {

  private final FlinkDriverClient mapShuffleClient;
  private final FlinkDriverClient.ReadClientFactory clientFactory;
  private final String shuffleKey;
  private final PartitionLocation[] locations;
  private final int subIndexStart;
  private final int subIndexEnd;
  private final AtomicInteger currentLocationIndex = new AtomicInteger(0);
  private final Object lock = new Object();
  private volatile TransportClient client;
  private volatile long streamId = 0;
  private boolean isClosed;
  private boolean isOpenSuccess;
  private Supplier<ByteBuf> bufferSupplier;
  private int initialCredit;
  private Consumer<RequestMessage> messageConsumer;
  /** Test hook (not upstream): told each stream id once the worker accepted an OPEN_STREAM. */
  private volatile Consumer<Long> onOpened = id -> {};

  FlinkBufferStream(FlinkDriverClient mapShuffleClient, FlinkDriverClient.ReadClientFactory clientFactory,
      String shuffleKey, PartitionLocation[] locations, int subIndexStart, int subIndexEnd) {
    this.mapShuffleClient = mapShuffleClient;
    this.clientFactory = clientFactory;
    this.shuffleKey = shuffleKey;
    this.locations = locations;
    this.subIndexStart = subIndexStart;
    this.subIndexEnd = subIndexEnd;
  }

  static FlinkBufferStream create(FlinkDriverClient client, FlinkDriverClient.ReadClientFactory factory,
      String shuffleKey, PartitionLocation[] locations, int subIndexStart, int subIndexEnd) {
    if (locations == null || locations.length == 0) {
      throw new IllegalStateException("no location for " + shuffleKey + " (upstream: an empty stream)");
    }
    return new FlinkBufferStream(client, factory, shuffleKey, locations, subIndexStart, subIndexEnd);
  }

  void onOpened(Consumer<Long> hook) {
    this.onOpened = hook;
  }

  public void open(Supplier<ByteBuf> bufferSupplier, int initialCredit, Consumer<RequestMessage> messageConsumer) {
    this.bufferSupplier = bufferSupplier;
    this.initialCredit = initialCredit;
    this.messageConsumer = messageConsumer;
    moveToNextPartitionIfPossible(0);
  }

  /** Sends READ_ADD_CREDIT; its (empty) reply is ignored, a failure goes to the consumer as an error. */
  public void addCredit(PbReadAddCredit pbReadAddCredit) {
    TransportClient c = this.client;
    c.sendRpc(
        new TransportMessage(MessageType.READ_ADD_CREDIT, pbReadAddCredit.toByteArray()).toByteBuffer(),
        new RpcResponseCallback() {
          @Override
          public void onSuccess(ByteBuffer response) {}

          @Override
          public void onFailure(Throwable e) {
            FlinkDriver.log("ReadAddCredit for stream %d failed: %s", streamId, e);
            messageConsumer.accept(new TransportableError(streamId, e));
          }
        });
  }

  public long getStreamId() {
    return streamId;
  }

  public TransportClient getClient() {
    return client;
  }

  private void closeStream(long id) {
    TransportClient c = client;
    if (c != null && c.isActive()) {
      c.sendRpc(
          new TransportMessage(MessageType.BUFFER_STREAM_END,
              PbBufferStreamEnd.newBuilder().setStreamType(StreamType.CreditStream).setStreamId(id).build()
                  .toByteArray())
              .toByteBuffer());
    }
  }

  private void cleanStream(long id) {
    if (isOpenSuccess) {
      mapShuffleClient.getReadClientHandler().removeHandler(id);
      clientFactory.unregisterSupplier(id);
      closeStream(id);
      isOpenSuccess = false;
    }
  }

  public void close() {
    synchronized (lock) {
      cleanStream(streamId);
      isClosed = true;
    }
  }

  /** On open (0) and on each BUFFER_STREAM_END: clean the ended stream, open the next location. */
  public void moveToNextPartitionIfPossible(long endedStreamId) {
    if (currentLocationIndex.get() > 0) {
      cleanStream(endedStreamId);
    }
    if (currentLocationIndex.get() < locations.length) {
      try {
        openStreamInternal();
      } catch (Exception e) {
        FlinkDriver.log("open stream failed: %s", e);
        messageConsumer.accept(new TransportableError(0L, e));
      }
    }
  }

  /** True once the last location was opened (no further location to move to). */
  public boolean onLastLocation() {
    return currentLocationIndex.get() >= locations.length;
  }

  private void openStreamInternal() throws IOException, InterruptedException {
    PartitionLocation loc = locations[currentLocationIndex.get()];
    this.client = clientFactory.createClientWithRetry(loc.getHost(), loc.getFetchPort());
    String fileName = locations[currentLocationIndex.getAndIncrement()].getFileName();
    TransportMessage openStream = new TransportMessage(MessageType.OPEN_STREAM,
        PbOpenStream.newBuilder()
            .setShuffleKey(shuffleKey)
            .setFileName(fileName)
            .setStartIndex(subIndexStart)
            .setEndIndex(subIndexEnd)
            .setInitialCredit(initialCredit)
            .build()
            .toByteArray());
    TransportClient c = client;
    c.sendRpc(openStream.toByteBuffer(), new RpcResponseCallback() {
      @Override
      public void onSuccess(ByteBuffer response) {
        try {
          PbStreamHandler pbStreamHandler = TransportMessage.fromByteBuffer(response).getParsedPayload();
          FlinkBufferStream.this.streamId = pbStreamHandler.getStreamId();
          synchronized (lock) {
            if (!isClosed) {
              clientFactory.registerSupplier(streamId, bufferSupplier);
              mapShuffleClient.getReadClientHandler().registerHandler(streamId, messageConsumer, c);
              isOpenSuccess = true;
              onOpened.accept(streamId);
            } else {
              closeStream(streamId);
            }
          }
        } catch (Exception e) {
          FlinkDriver.log("open file %s stream for %s: bad reply: %s", fileName, shuffleKey, e);
          messageConsumer.accept(new TransportableError(streamId, e));
        }
      }

      @Override
      public void onFailure(Throwable e) {
        FlinkDriver.log("open file %s stream for %s failed: %s", fileName, shuffleKey, e);
        messageConsumer.accept(new TransportableError(streamId, e));
      }
    });
  }
}
