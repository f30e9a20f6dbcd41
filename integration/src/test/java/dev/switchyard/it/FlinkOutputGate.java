package dev.switchyard.it;

import java.io.IOException;
import java.util.Optional;
import org.apache.celeborn.common.protocol.PartitionLocation;
import org.apache.celeborn.shaded.io.netty.buffer.ByteBuf;
import org.apache.celeborn.shaded.io.netty.buffer.Unpooled;

/**
 * One map task's writer, after Celeborn's Flink {@code RemoteShuffleOutputGate} and {@code
 * BufferPacker} (0.5.4):
 *
 * <ol>
 *   <li>{@link #regionStart}: on the first region {@code registerMapPartitionTask} (the
 *       LifecycleManager asks the master for one slot per map task and reserves it, partition type
 *       MAP), then PUSH_DATA_HAND_SHAKE once (numPartitions = number of sub-partitions,
 *       bufferSize), then REGION_START (region index, isBroadcast); a HARD_SPLIT reply or an RPC
 *       failure revives (new location, handshake again), up to {@code
 *       celeborn.client.push.revive.maxRetries} times;
 *   <li>{@link #write}: Flink buffers (16 bytes left free for Celeborn's batch header, then {@code
 *       u8 dataType, u8 isCompressed, i32 size} and the data); consecutive buffers of the same
 *       sub-partition are packed into one buffer of at most bufferSize bytes (later ones without
 *       their 16 free bytes), and each full buffer is pushed (PUSH_DATA, header {@code subIdx,
 *       attemptId, batchId, length}) when the sub-partition changes or it is full;
 *   <li>{@link #regionFinish}: the packed remainder is pushed, then REGION_FINISH;
 *   <li>{@link #finish}: MapperEnd with the partition id ({@code mapPartitionMapperEnd}): the
 *       LifecycleManager's MAP commit handler commits this partition's file before it answers;
 *   <li>{@link #close}: the client's per-map state is dropped.
 * </ol>
 */
public class FlinkOutputGate {

  /** Celeborn batch header: subPartitionId, attemptId, batchId, length (BufferUtils.HEADER_LENGTH_PREFIX). */
  public static final int HEADER_LENGTH_PREFIX = 16;
  /** Plus Flink's buffer header: dataType, isCompressed, size (BufferUtils.HEADER_LENGTH). */
  public static final int HEADER_LENGTH = HEADER_LENGTH_PREFIX + 1 + 1 + 4;
  /** Flink Buffer.DataType ordinals. */
  public static final int DATA_BUFFER = 1;
  public static final int EVENT_BUFFER = 2;

  private final FlinkDriverClient client;
  private final int shuffleId;
  private final int mapId;
  private final int attemptId;
  private final int partitionId;
  private final int numSubs;
  private final int bufferSize;
  private final int numMappers;
  private final int maxReviveTimes;
  private PartitionLocation partitionLocation;
  private int currentRegionIndex = 0;
  private boolean isRegisterShuffle = false;
  private boolean hasSentHandshake = false;
  // BufferPacker state
  private ByteBuf cachedBuffer;
  private int currentSubIdx = -1;

  public FlinkOutputGate(FlinkDriverClient client, int shuffleId, int mapId, int attemptId, int partitionId,
      int numSubs, int bufferSize, int numMappers, int maxReviveTimes) {
    this.client = client;
    this.shuffleId = shuffleId;
    this.mapId = mapId;
    this.attemptId = attemptId;
    this.partitionId = partitionId;
    this.numSubs = numSubs;
    this.bufferSize = bufferSize;
    this.numMappers = numMappers;
    this.maxReviveTimes = maxReviveTimes;
  }

  public PartitionLocation location() {
    return partitionLocation;
  }

  public int mapId() {
    return mapId;
  }

  /** RemoteShuffleOutputGate.regionStart. */
  public void regionStart(boolean isBroadcast) throws IOException {
    registerShuffle();
    handshake();
    regionStartWithRevive(isBroadcast);
  }

  /** A Flink network buffer of bufferSize bytes holding one record of {@code data}. */
  public static ByteBuf flinkBuffer(int bufferSize, int dataType, byte[] data) {
    if (HEADER_LENGTH + data.length > bufferSize) {
      throw new IllegalArgumentException(data.length + " bytes do not fit a buffer of " + bufferSize);
    }
    ByteBuf b = Unpooled.buffer(bufferSize, bufferSize);
    // BufferUtils.setBufferHeader: 16 zero bytes, then dataType, isCompressed, size
    b.writeInt(0).writeInt(0).writeInt(0).writeInt(0);
    b.writeByte(dataType);
    b.writeBoolean(false);
    b.writeInt(data.length);
    b.writeBytes(data);
    return b;
  }

  /** RemoteShuffleOutputGate.write -> BufferPacker.process. */
  public void write(ByteBuf buffer, int subIdx) throws IOException {
    if (buffer.readableBytes() == 0) {
      buffer.release();
      return;
    }
    if (cachedBuffer == null) {
      cachedBuffer = buffer;
      currentSubIdx = subIdx;
    } else if (currentSubIdx != subIdx) {
      ByteBuf dumped = cachedBuffer;
      int targetSubIdx = currentSubIdx;
      cachedBuffer = buffer;
      currentSubIdx = subIdx;
      handleRipeBuffer(dumped, targetSubIdx);
    } else if (cachedBuffer.readableBytes() + buffer.readableBytes() - HEADER_LENGTH_PREFIX
        <= cachedBuffer.maxCapacity()) {
      cachedBuffer.writeBytes(buffer, HEADER_LENGTH_PREFIX, buffer.readableBytes() - HEADER_LENGTH_PREFIX);
      buffer.release();
    } else {
      ByteBuf dumped = cachedBuffer;
      cachedBuffer = buffer;
      handleRipeBuffer(dumped, currentSubIdx);
    }
  }

  private void drain() throws IOException {
    if (cachedBuffer != null) {
      handleRipeBuffer(cachedBuffer, currentSubIdx);
    }
    cachedBuffer = null;
    currentSubIdx = -1;
  }

  /** RemoteShuffleOutputGate.write(ByteBuf, subIdx): wrap the buffer's bytes, release it once sent. */
  private void handleRipeBuffer(ByteBuf byteBuf, int subIdx) throws IOException {
    client.pushDataToLocation(shuffleId, mapId, attemptId, subIdx, Unpooled.wrappedBuffer(byteBuf.nioBuffer()),
        partitionLocation, byteBuf::release);
  }

  /** RemoteShuffleOutputGate.regionFinish. */
  public void regionFinish() throws IOException {
    drain();
    client.regionFinish(shuffleId, mapId, attemptId, partitionLocation);
    currentRegionIndex++;
  }

  /** RemoteShuffleOutputGate.finish. */
  public void finish() throws IOException {
    client.mapPartitionMapperEnd(shuffleId, mapId, attemptId, numMappers, partitionLocation.getId());
  }

  /** RemoteShuffleOutputGate.close. */
  public void close() {
    if (cachedBuffer != null) {
      cachedBuffer.release();
      cachedBuffer = null;
    }
    client.cleanup(shuffleId, mapId, attemptId);
  }

  private void registerShuffle() throws IOException {
    if (!isRegisterShuffle) {
      partitionLocation = client.registerMapPartitionTask(shuffleId, numMappers, mapId, attemptId, partitionId);
      if (partitionLocation == null) {
        throw new IOException("registerMapPartitionTask returned no location for map " + mapId + " partition "
            + partitionId);
      }
      currentRegionIndex = 0;
      isRegisterShuffle = true;
    }
  }

  private void regionStartWithRevive(boolean isBroadcast) throws IOException {
    int remainingReviveTimes = maxReviveTimes;
    boolean hasSentRegionStart = false;
    while (remainingReviveTimes-- > 0 && !hasSentRegionStart) {
      Optional<PartitionLocation> revivePartition =
          client.regionStart(shuffleId, mapId, attemptId, partitionLocation, currentRegionIndex, isBroadcast);
      if (revivePartition.isPresent()) {
        partitionLocation = revivePartition.get();
        hasSentRegionStart = false;
        // a revived location gets a handshake first
        hasSentHandshake = false;
        handshake();
      } else {
        hasSentRegionStart = true;
      }
    }
    if (remainingReviveTimes == 0 && !hasSentRegionStart) {
      throw new IOException("After retry " + maxReviveTimes + " times, still failed to send regionStart");
    }
  }

  private void handshake() throws IOException {
    int remainingReviveTimes = maxReviveTimes;
    while (remainingReviveTimes-- > 0 && !hasSentHandshake) {
      Optional<PartitionLocation> revivePartition =
          client.pushDataHandShake(shuffleId, mapId, attemptId, numSubs, bufferSize, partitionLocation);
      if (revivePartition.isPresent() && remainingReviveTimes > 0) {
        partitionLocation = revivePartition.get();
        hasSentHandshake = false;
      } else {
        hasSentHandshake = true;
      }
    }
    if (remainingReviveTimes == 0 && !hasSentHandshake) {
      throw new IOException("After retry " + maxReviveTimes + " times, still failed to send handshake");
    }
  }
}
