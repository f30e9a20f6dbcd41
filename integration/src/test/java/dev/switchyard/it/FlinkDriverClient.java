package dev.switchyard.it;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import org.apache.celeborn.client.ShuffleClientImpl;
import org.apache.celeborn.common.CelebornConf;
import org.apache.celeborn.common.exception.CelebornIOException;
import org.apache.celeborn.common.exception.PartitionUnRetryAbleException;
import org.apache.celeborn.common.network.TransportContext;
import org.apache.celeborn.common.network.buffer.NettyManagedBuffer;
import org.apache.celeborn.common.network.client.RpcResponseCallback;
import org.apache.celeborn.common.network.client.TransportClient;
import org.apache.celeborn.common.network.client.TransportClientBootstrap;
import org.apache.celeborn.common.network.client.TransportClientFactory;
import org.apache.celeborn.common.network.protocol.PushData;
import org.apache.celeborn.common.network.protocol.TransportMessage;
import org.apache.celeborn.common.network.util.TransportConf;
import org.apache.celeborn.common.protocol.MessageType;
import org.apache.celeborn.common.protocol.PartitionLocation;
import org.apache.celeborn.common.protocol.PbChangeLocationPartitionInfo;
import org.apache.celeborn.common.protocol.PbChangeLocationResponse;
import org.apache.celeborn.common.protocol.PbPartitionLocation;
import org.apache.celeborn.common.protocol.PbPushDataHandShake;
import org.apache.celeborn.common.protocol.PbRegionFinish;
import org.apache.celeborn.common.protocol.PbRegionStart;
import org.apache.celeborn.common.protocol.ReviveRequest;
import org.apache.celeborn.common.protocol.TransportModuleConstants;
import org.apache.celeborn.common.protocol.message.ControlMessages;
import org.apache.celeborn.common.protocol.message.StatusCode;
import org.apache.celeborn.common.util.PbSerDeUtils;
import org.apache.celeborn.common.util.Utils;
import org.apache.celeborn.common.write.PushState;
import org.apache.celeborn.shaded.io.netty.buffer.ByteBuf;
import org.apache.celeborn.shaded.io.netty.buffer.UnpooledByteBufAllocator;
import org.apache.celeborn.shaded.io.netty.channel.ChannelInboundHandlerAdapter;
import scala.Tuple3;
import scala.reflect.ClassTag$;

/**
 * The TaskManager side of Celeborn's Flink plugin, rewritten against the Spark client jar:
 * Maven Central has no {@code celeborn-client-flink-*} artifact, but {@code
 * celeborn-client-spark-3-shaded} carries {@link ShuffleClientImpl} (which already implements
 * {@code registerMapPartitionTask}, {@code mapPartitionMapperEnd} and the reducer file group
 * lookup), the transport client and every map-partition message class.
 *
 * <p>This follows {@code client-flink/common/.../readclient/FlinkShuffleClientImpl.java} of Celeborn
 * 0.5.4 call for call (same RPCs, same order, same reply handling, same revive and retry
 * behaviour): {@link #pushDataHandShake}, {@link #regionStart}, {@link #regionFinish}, {@link
 * #pushDataToLocation} (the 16-byte big-endian batch header written into the front of the Flink
 * buffer), {@link #readBufferedPartition}. The read side uses its own {@link TransportContext}
 * with a {@link FlinkReadHandler} and connections whose frame decoder is {@link
 * FlinkFrameDecoder}, as {@code FlinkTransportClientFactory} does.
 *
 * <p>One instance stands for one TaskManager ({@code FlinkShuffleClientImpl.get} keeps one per
 * JVM); tests that need a separate read connection (a reader that dies) make a second one.
 */
public class FlinkDriverClient extends ShuffleClientImpl {

  private final FlinkReadHandler readClientHandler = new FlinkReadHandler();
  private final ConcurrentHashMap<String, TransportClient> currentClient = new ConcurrentHashMap<>();
  private final TransportContext context;
  private ReadClientFactory readClientFactory;
  /** Test hook (not upstream): sees every push body, header included, just before it is sent. */
  interface PushRecorder {
    void pushed(int shuffleId, int mapId, int attemptId, ByteBuf body);
  }

  private volatile PushRecorder pushRecorder;

  public FlinkDriverClient(String appUniqueId, String lifecycleManagerHost, int lifecycleManagerPort,
      CelebornConf conf) {
    // RemoteShuffleOutputGate passes its (never assigned, hence null) userIdentifier.
    super(appUniqueId, conf, null);
    String module = TransportModuleConstants.DATA_MODULE;
    TransportConf dataTransportConf =
        Utils.fromCelebornConf(conf, module, conf.getInt("celeborn." + module + ".io.threads", 8));
    this.context = new TransportContext(dataTransportConf, readClientHandler, conf.clientCloseIdleConnections());
    this.setupLifecycleManagerRef(lifecycleManagerHost, lifecycleManagerPort);
  }

  /** FlinkTransportClientFactory: unpooled direct allocator, Flink's frame decoder per connection. */
  static final class ReadClientFactory extends TransportClientFactory {
    private final ConcurrentHashMap<Long, Supplier<ByteBuf>> bufferSuppliers = new ConcurrentHashMap<>();

    ReadClientFactory(TransportContext context, List<TransportClientBootstrap> bootstraps) {
      super(context, bootstraps);
      this.pooledAllocator = new UnpooledByteBufAllocator(true);
    }

    TransportClient createClientWithRetry(String host, int port) throws IOException, InterruptedException {
      Supplier<ChannelInboundHandlerAdapter> decoder = () -> new FlinkFrameDecoder(bufferSuppliers);
      return retryCreateClient(host, port, -1, decoder);
    }

    void registerSupplier(long streamId, Supplier<ByteBuf> supplier) {
      bufferSuppliers.put(streamId, supplier);
    }

    void unregisterSupplier(long streamId) {
      bufferSuppliers.remove(streamId);
    }
  }

  private synchronized void initializeTransportClientFactory() {
    if (readClientFactory == null) {
      // With celeborn.auth.enabled the bootstraps authenticate each read connection (SASL).
      readClientFactory = new ReadClientFactory(context, createBootstraps());
    }
  }

  @Override
  public void setupLifecycleManagerRef(String host, int port) {
    super.setupLifecycleManagerRef(host, port);
    initializeTransportClientFactory();
  }

  public FlinkReadHandler getReadClientHandler() {
    return readClientHandler;
  }

  ReadClientFactory readClientFactory() {
    initializeTransportClientFactory();
    return readClientFactory;
  }

  void setPushRecorder(PushRecorder recorder) {
    this.pushRecorder = recorder;
  }

  String appUniqueId() {
    return appUniqueId;
  }

  @Override
  public void shutdown() {
    super.shutdown();
    if (readClientFactory != null) {
      readClientFactory.close();
    }
    readClientHandler.close();
  }

  // ---------------------------------------------------------------- read side

  /** FlinkShuffleClientImpl.readBufferedPartition. */
  public FlinkBufferStream readBufferedPartition(int shuffleId, int partitionId, int subPartitionIndexStart,
      int subPartitionIndexEnd) throws IOException {
    String shuffleKey = Utils.makeShuffleKey(appUniqueId, shuffleId);
    ReduceFileGroups fileGroups = updateFileGroup(shuffleId, partitionId);
    if (fileGroups.partitionGroups.size() == 0 || !fileGroups.partitionGroups.containsKey(partitionId)) {
      throw new PartitionUnRetryAbleException(partitionId + " may be lost.");
    }
    PartitionLocation[] partitionLocations =
        fileGroups.partitionGroups.get(partitionId).toArray(new PartitionLocation[0]);
    Arrays.sort(partitionLocations, Comparator.comparingInt(PartitionLocation::getEpoch));
    initializeTransportClientFactory();
    return FlinkBufferStream.create(this, readClientFactory, shuffleKey, partitionLocations,
        subPartitionIndexStart, subPartitionIndexEnd);
  }

  /**
   * FlinkShuffleClientImpl.updateFileGroup: map partitions commit one by one, so the cached groups
   * are reloaded whenever they lack the partition asked for.
   */
  @Override
  public ReduceFileGroups updateFileGroup(int shuffleId, int partitionId) throws CelebornIOException {
    ReduceFileGroups reduceFileGroups =
        reduceFileGroupsMap.computeIfAbsent(shuffleId, id -> new Tuple3<>(new ReduceFileGroups(), null, null))._1();
    if (reduceFileGroups.partitionIds != null && reduceFileGroups.partitionIds.contains(partitionId)) {
      return reduceFileGroups;
    }
    synchronized (reduceFileGroups) {
      if (reduceFileGroups.partitionIds == null || !reduceFileGroups.partitionIds.contains(partitionId)) {
        Tuple3<ReduceFileGroups, String, Exception> fileGroups = loadFileGroupInternal(shuffleId);
        ReduceFileGroups newGroups = fileGroups._1();
        if (newGroups == null) {
          throw new CelebornIOException(loadFileGroupException(shuffleId, partitionId, fileGroups._2()));
        } else if (!newGroups.partitionIds.contains(partitionId)) {
          throw new CelebornIOException(
              String.format("Shuffle data lost for shuffle %d partition %d.", shuffleId, partitionId));
        }
        reduceFileGroups.update(newGroups);
      }
    }
    return reduceFileGroups;
  }

  // ---------------------------------------------------------------- write side

  /** FlinkShuffleClientImpl.pushDataToLocation: {@code data} has 16 free bytes in front. */
  public int pushDataToLocation(int shuffleId, int mapId, int attemptId, int partitionId, ByteBuf data,
      PartitionLocation location, Runnable closeCallBack) throws IOException {
    final String mapKey = Utils.makeMapKey(shuffleId, mapId, attemptId);
    PushState pushState = getPushState(mapKey);
    final int nextBatchId = pushState.nextBatchId();
    int totalLength = data.readableBytes();
    data.markWriterIndex();
    data.writerIndex(0);
    data.writeInt(partitionId);
    data.writeInt(attemptId);
    data.writeInt(nextBatchId);
    data.writeInt(totalLength - BATCH_HEADER_SIZE);
    data.resetWriterIndex();
    PushRecorder recorder = pushRecorder;
    if (recorder != null) {
      recorder.pushed(shuffleId, mapId, attemptId, data.duplicate());
    }
    limitMaxInFlight(mapKey, pushState, location.hostAndPushPort());
    pushState.addBatch(nextBatchId, location.hostAndPushPort());

    NettyManagedBuffer buffer = new NettyManagedBuffer(data);
    final String shuffleKey = Utils.makeShuffleKey(appUniqueId, shuffleId);
    PushData pushData = new PushData(PRIMARY_MODE, shuffleKey, location.getUniqueId(), buffer);
    RpcResponseCallback callback = new RpcResponseCallback() {
      @Override
      public void onSuccess(ByteBuffer response) {
        pushState.removeBatch(nextBatchId, location.hostAndPushPort());
      }

      @Override
      public void onFailure(Throwable e) {
        pushState.removeBatch(nextBatchId, location.hostAndPushPort());
        if (pushState.exception.get() != null) {
          return;
        }
        String errorMsg = String.format("Push data byteBuf to %s failed for shuffle %d map %d attempt %d batch %d.",
            location.hostAndPushPort(), shuffleId, mapId, attemptId, nextBatchId);
        pushState.exception.compareAndSet(null, new CelebornIOException(errorMsg, e));
      }
    };
    try {
      TransportClient client = createClientWaitingInFlightRequest(location, mapKey, pushState);
      client.pushData(pushData, pushDataTimeout, callback, closeCallBack);
    } catch (Exception e) {
      callback.onFailure(new CelebornIOException(StatusCode.PUSH_DATA_CREATE_CONNECTION_FAIL_PRIMARY, e));
    }
    return totalLength;
  }

  private TransportClient createClientWaitingInFlightRequest(PartitionLocation location, String mapKey,
      PushState pushState) throws IOException, InterruptedException {
    TransportClient client = dataClientFactory.createClient(location.getHost(), location.getPushPort(), location.getId());
    if (currentClient.get(mapKey) != client) {
      // keep the data of one map task in order across a connection change
      if (currentClient.get(mapKey) != null) {
        limitZeroInFlight(mapKey, pushState);
      }
      currentClient.put(mapKey, client);
    }
    return currentClient.get(mapKey);
  }

  /** FlinkShuffleClientImpl.pushDataHandShake: empty reply = OK; HARD_SPLIT or an IOException = revive. */
  public Optional<PartitionLocation> pushDataHandShake(int shuffleId, int mapId, int attemptId, int numPartitions,
      int bufferSize, PartitionLocation location) throws IOException {
    String shuffleKey = Utils.makeShuffleKey(appUniqueId, shuffleId);
    byte[] payload =
        PbPushDataHandShake.newBuilder()
            .setMode(PbPartitionLocation.Mode.forNumber(PRIMARY_MODE))
            .setShuffleKey(shuffleKey)
            .setPartitionUniqueId(location.getUniqueId())
            .setAttemptId(attemptId)
            .setNumPartitions(numPartitions)
            .setBufferSize(bufferSize)
            .build()
            .toByteArray();
    return sendOrRevive(shuffleId, mapId, attemptId, location, MessageType.PUSH_DATA_HAND_SHAKE, payload, "handshake");
  }

  /** FlinkShuffleClientImpl.regionStart: replied like the handshake. */
  public Optional<PartitionLocation> regionStart(int shuffleId, int mapId, int attemptId, PartitionLocation location,
      int currentRegionIdx, boolean isBroadcast) throws IOException {
    String shuffleKey = Utils.makeShuffleKey(appUniqueId, shuffleId);
    byte[] payload =
        PbRegionStart.newBuilder()
            .setMode(PbPartitionLocation.Mode.forNumber(PRIMARY_MODE))
            .setShuffleKey(shuffleKey)
            .setPartitionUniqueId(location.getUniqueId())
            .setAttemptId(attemptId)
            .setCurrentRegionIndex(currentRegionIdx)
            .setIsBroadcast(isBroadcast)
            .build()
            .toByteArray();
    return sendOrRevive(
        shuffleId, mapId, attemptId, location, MessageType.REGION_START, payload, "regionStart " + currentRegionIdx);
  }

  /**
   * The shared body of pushDataHandShake and regionStart upstream: a synchronous RPC on the
   * location's push connection, with retries; an IOException or a HARD_SPLIT reply revives.
   */
  private Optional<PartitionLocation> sendOrRevive(int shuffleId, int mapId, int attemptId,
      PartitionLocation location, MessageType type, byte[] payload, String what) throws IOException {
    final String mapKey = Utils.makeMapKey(shuffleId, mapId, attemptId);
    final PushState pushState = pushStates.computeIfAbsent(mapKey, s -> new PushState(conf));
    return retrySendMessage(() -> {
      TransportClient client = createClientWaitingInFlightRequest(location, mapKey, pushState);
      ByteBuffer response;
      try {
        response = client.sendRpcSync(new TransportMessage(type, payload).toByteBuffer(), conf.pushDataTimeoutMs());
      } catch (IOException e) {
        FlinkDriver.log("%s %s map %d attempt %d failed, revive: %s", what, location.getUniqueId(), mapId,
            attemptId, e);
        return revive(shuffleId, mapId, attemptId, location);
      }
      if (response.hasRemaining() && response.get() == StatusCode.HARD_SPLIT.getValue()) {
        return revive(shuffleId, mapId, attemptId, location);
      }
      return Optional.empty();
    });
  }

  /** FlinkShuffleClientImpl.revive: one ReviveRequest (cause HARD_SPLIT) to the LifecycleManager. */
  public Optional<PartitionLocation> revive(int shuffleId, int mapId, int attemptId, PartitionLocation location)
      throws CelebornIOException {
    Set<Integer> mapIds = new HashSet<>();
    mapIds.add(mapId);
    List<ReviveRequest> requests = new ArrayList<>();
    requests.add(new ReviveRequest(shuffleId, mapId, attemptId, location.getId(), location.getEpoch(), location,
        StatusCode.HARD_SPLIT));
    PbChangeLocationResponse response = lifecycleManagerRef.askSync(
        ControlMessages.Revive$.MODULE$.apply(shuffleId, mapIds, requests),
        conf.clientRpcRequestPartitionLocationAskTimeout(),
        ClassTag$.MODULE$.apply(PbChangeLocationResponse.class));
    PbChangeLocationPartitionInfo partitionInfo = response.getPartitionInfo(0);
    StatusCode respStatus = Utils.toStatusCode(partitionInfo.getStatus());
    if (StatusCode.SUCCESS.equals(respStatus)) {
      PartitionLocation loc = PbSerDeUtils.fromPbPartitionLocation(partitionInfo.getPartition());
      FlinkDriver.log("revived map %d: %s -> %s", mapId, location.getUniqueId(), loc.getUniqueId());
      return Optional.of(loc);
    }
    throw new CelebornIOException("RegionStart revive failed");
  }

  /** FlinkShuffleClientImpl.regionFinish: the reply body is ignored. */
  public void regionFinish(int shuffleId, int mapId, int attemptId, PartitionLocation location) throws IOException {
    final String mapKey = Utils.makeMapKey(shuffleId, mapId, attemptId);
    final PushState pushState = pushStates.computeIfAbsent(mapKey, s -> new PushState(conf));
    retrySendMessage(() -> {
      final String shuffleKey = Utils.makeShuffleKey(appUniqueId, shuffleId);
      TransportClient client = createClientWaitingInFlightRequest(location, mapKey, pushState);
      client.sendRpcSync(
          new TransportMessage(MessageType.REGION_FINISH,
              PbRegionFinish.newBuilder()
                  .setMode(PbPartitionLocation.Mode.forNumber(PRIMARY_MODE))
                  .setShuffleKey(shuffleKey)
                  .setPartitionUniqueId(location.getUniqueId())
                  .setAttemptId(attemptId)
                  .build()
                  .toByteArray())
              .toByteBuffer(),
          conf.pushDataTimeoutMs());
      return null;
    });
  }

  @FunctionalInterface
  interface ThrowingSupplier<R> {
    R get() throws Exception;
  }

  /** FlinkShuffleClientImpl.retrySendMessage: retries IO-ish failures celeborn.push.io.maxRetries times. */
  private <R> R retrySendMessage(ThrowingSupplier<R> supplier) throws IOException {
    int retryTimes = 0;
    boolean isSuccess = false;
    Exception currentException = null;
    R result = null;
    while (!Thread.currentThread().isInterrupted() && !isSuccess
        && retryTimes < conf.networkIoMaxRetries(TransportModuleConstants.PUSH_MODULE)) {
      try {
        result = supplier.get();
        isSuccess = true;
      } catch (Exception e) {
        currentException = e;
        if (e instanceof InterruptedException) {
          Thread.currentThread().interrupt();
        }
        if (shouldRetry(e)) {
          retryTimes++;
          sleepUninterruptibly(conf.networkIoRetryWaitMs(TransportModuleConstants.PUSH_MODULE));
        } else {
          break;
        }
      }
    }
    if (!isSuccess) {
      if (currentException instanceof IOException) {
        throw (IOException) currentException;
      }
      throw new CelebornIOException(
          currentException == null ? "interrupted" : currentException.getMessage(), currentException);
    }
    return result;
  }

  private static boolean shouldRetry(Throwable e) {
    return e instanceof IOException
        || e instanceof TimeoutException
        || (e.getCause() != null && e.getCause() instanceof TimeoutException)
        || (e.getCause() != null && e.getCause() instanceof IOException)
        || (e instanceof RuntimeException && e.getMessage() != null
            && e.getMessage().startsWith(IOException.class.getName()));
  }

  private static void sleepUninterruptibly(long ms) {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
    boolean interrupted = false;
    while (true) {
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        break;
      }
      try {
        TimeUnit.NANOSECONDS.sleep(left);
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void cleanup(int shuffleId, int mapId, int attemptId) {
    super.cleanup(shuffleId, mapId, attemptId);
    currentClient.remove(Utils.makeMapKey(shuffleId, mapId, attemptId));
  }
}
