package redlockotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlockgo/redlock"
	redlockotel "github.com/redlockgo/redlock/otel"
)

func Example() {
	mr := miniredis.NewMiniRedis() // your Redis in real code
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	// In real code: your MeterProvider and TracerProvider, or none for the
	// global ones.
	reader := sdkmetric.NewManualReader()
	obs, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		log.Fatal(err)
	}
	locker, err := redlock.NewLocker(client, redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	if err := locker.Do(context.Background(), "report", func(context.Context) error { return nil }); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Println(m.Name)
	}
	// Output:
	// redlock.acquire.duration
	// redlock.acquire.wait
	// redlock.hold.duration
}
