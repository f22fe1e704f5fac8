#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int block = atoi(argv[1]);
    char *send = malloc(block), *recv = malloc((size_t)block * size);
    memset(send, rank & 0xff, block);
    double t0 = MPI_Wtime();
    MPI_Allgather(send, block, MPI_BYTE, recv, block, MPI_BYTE, MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    int bad = 0;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < block; i++)
            if ((unsigned char)recv[(size_t)r * block + i] != (r & 0xff)) bad = 1;
    double tmax = 0; int anybad = 0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("latency_us %.3f bad %d\n", tmax * 1e6, anybad);
    free(send); free(recv);
    MPI_Finalize();
    /* Only the root holds the reduced verdict: it alone reports it. */
    return rank == 0 ? anybad : 0;
}
