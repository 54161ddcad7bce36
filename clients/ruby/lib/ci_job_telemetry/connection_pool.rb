# frozen_string_literal: true

require "net/http"

module CiJobTelemetry
  # One keep-alive connection to the service, whose every wait ends at the call's deadline.
  #
  # Net::HTTP's timeouts bound each wait on its own: a server that sends one byte every read_timeout keeps a
  # call going for ever. So the connection's Net::BufferedIO gets DeadlineIO, which sets each read and write
  # wait to what is left of the call's deadline, and raises Net::ReadTimeout or Net::WriteTimeout once none is.
  # The deadline is checked in the caller's own thread: no watchdog thread, and no Timeout.timeout (which raises
  # into a thread wherever it happens to be).
  class Connection < Net::HTTP
    # Prepended to the connection's Net::BufferedIO: rbuf_fill and write0 are where it waits on the socket.
    module DeadlineIO
      attr_writer :deadline

      private

      def rbuf_fill
        @read_timeout = time_left(Net::ReadTimeout)
        super
      end

      def write0(*strings)
        @write_timeout = time_left(Net::WriteTimeout)
        super
      end

      def time_left(timeout_error)
        left = @deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        raise timeout_error if left <= 0

        left
      end
    end

    attr_reader :requests

    def initialize(*)
      super
      @requests = 0
      @deadline = nil
    end

    # Every wait of the next request ends by `deadline` (CLOCK_MONOTONIC seconds), connecting included.
    def deadline=(deadline)
      @deadline = deadline
      @socket.deadline = deadline if @socket.is_a?(DeadlineIO)
      self.open_timeout = [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0.001].max
    end

    def request(*)
      @requests += 1
      super
    end

    private

    # Net::HTTP's hook after each (re)connect, with @socket just built.
    def on_connect
      @socket.singleton_class.prepend(DeadlineIO)
      @socket.deadline = @deadline
    end
  end

  # Idle keep-alive connections, shared by the threads of a process (Puma's). A call takes one, or opens a new
  # one when none is idle: it never waits for another thread's, since the wait would come out of its deadline.
  # Kept last-in first-out, so the connections in use stay warm and the rest age out; at most `size` are kept.
  # A connection is kept only after a whole, well-formed exchange: after any failure it is closed, so no later
  # call reads what a slow answer sends late.
  class ConnectionPool
    def initialize(size:, &open)
      @size = size
      @open = open
      @idle = []
      @mutex = Mutex.new
    end

    def checkout
      @mutex.synchronize { @idle.pop } || @open.call
    end

    def checkin(connection)
      kept = @mutex.synchronize { @idle.size < @size && @idle.push(connection) }
      discard(connection) unless kept
    end

    def discard(connection)
      connection.finish if connection.started?
    rescue StandardError
      nil
    end

    def idle_count
      @mutex.synchronize { @idle.size }
    end

    def close
      @mutex.synchronize { @idle.slice!(0..) }.each { |connection| discard(connection) }
    end
  end
end
