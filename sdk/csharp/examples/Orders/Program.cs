class X{static void Main(){}}
